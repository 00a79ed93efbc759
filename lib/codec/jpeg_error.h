// SPDX-License-Identifier: Apache-2.0
// libjpeg's error handling for lib/codec's decoders and the restart transcode: an error manager
// whose error_exit formats the message and longjmps back into the phase that called libjpeg
// (it must not return), and an output_message that drops warnings. Internal to lib/codec.
#pragma once

// jpeglib.h needs FILE and size_t declared first.
// clang-format off
#include <csetjmp>
#include <cstdio>
#include <jpeglib.h>
// clang-format on

namespace dspipe::codec {

struct JpegErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

// error_exit: the message into JpegErrorMgr::message, then longjmp to JpegErrorMgr::jump.
inline void JpegOnError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}
// Warnings (corrupt entropy data, premature end of data) are not printed: the decode goes on
// with what libjpeg fills in, as cv::imdecode did.
inline void JpegOnWarning(j_common_ptr) {}

// Sets up *err as a standard manager with the two handlers above; returns it for cinfo.err.
inline jpeg_error_mgr* JpegErrors(JpegErrorMgr* err) {
  jpeg_error_mgr* e = jpeg_std_error(&err->pub);
  e->error_exit = JpegOnError;
  e->output_message = JpegOnWarning;
  err->message[0] = '\0';
  return e;
}

}  // namespace dspipe::codec
