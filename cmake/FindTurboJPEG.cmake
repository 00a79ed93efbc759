# FindTurboJPEG: libjpeg-turbo's TurboJPEG API (Debian: libturbojpeg0-dev). Defines TurboJPEG::TurboJPEG.
include(${CMAKE_CURRENT_LIST_DIR}/dspipeFindSystemLib.cmake)
dspipe_find_system_lib(TurboJPEG TurboJPEG::TurboJPEG turbojpeg.h turbojpeg)
