// SPDX-License-Identifier: Apache-2.0
// Fuzzes opening a plain LMDB (one written by another tool: records in the main database) and
// sniffing/decoding its values as the loader and `dsconvert verify` do. The input is a list
// of entries [key length: 1 byte][value length: 2 bytes LE][key][value]; the harness writes
// them into a fresh LMDB with the real liblmdb, then opens it with Dataset::Open (which must
// tell plain LMDBs from dspipe ones: a key named "records" or "meta" in the main database is
// the interesting case) and reads every record.
#include <lmdb.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "codec/image.h"
#include "dspipe/dataset.h"
#include "fuzz_util.h"

namespace {

void Check(int rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "harness: %s: %s\n", what, mdb_strerror(rc));
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dspipe;
  const std::string dir = fuzz::ScratchDir() + "/plain";
  fuzz::ResetDir(dir);
  MDB_env* env = nullptr;
  Check(mdb_env_create(&env), "mdb_env_create");
  Check(mdb_env_set_mapsize(env, size_t{16} << 20), "mdb_env_set_mapsize");
  Check(mdb_env_open(env, dir.c_str(), MDB_NOSYNC, 0644), "mdb_env_open");
  MDB_txn* txn = nullptr;
  Check(mdb_txn_begin(env, nullptr, 0, &txn), "mdb_txn_begin");
  MDB_dbi dbi;
  Check(mdb_dbi_open(txn, nullptr, 0, &dbi), "mdb_dbi_open");
  size_t pos = 0;
  while (pos + 3 <= size) {
    const size_t klen = data[pos];
    const size_t vlen = data[pos + 1] | (size_t{data[pos + 2]} << 8);
    pos += 3;
    if (pos + klen + vlen > size) break;
    MDB_val k{klen, const_cast<uint8_t*>(data + pos)};
    MDB_val v{vlen, const_cast<uint8_t*>(data + pos + klen)};
    pos += klen + vlen;
    if (klen == 0) continue;  // LMDB refuses empty keys
    Check(mdb_put(txn, dbi, &k, &v, 0), "mdb_put");
  }
  Check(mdb_txn_commit(txn), "mdb_txn_commit");
  mdb_env_close(env);

  std::unique_ptr<Dataset> ds;
  DatasetOpenOptions oo;
  const Status s = Dataset::Open(dir, oo, &ds);
  if (!s.ok()) {
    DSPIPE_FUZZ_CHECK(s.message().find(dir) != std::string::npos);
    return 0;
  }
  DSPIPE_FUZZ_CHECK(ds->size() > 0);
  for (uint64_t i = 0; i < ds->size() && i < 64; ++i) {
    (void)ds->KeyName(i);
    (void)ds->Read(i, [&](const RecordView& r) -> Status {
      codec::ImageProbe probe;
      DSPIPE_RETURN_IF_ERROR(codec::Probe(r.image, &probe));
      if (uint64_t{static_cast<uint32_t>(probe.width)} * static_cast<uint32_t>(probe.height) >
          (uint64_t{1} << 22)) {
        return Status::OK();
      }
      cv::Mat img;
      return codec::DecodeImage(r.image, ds->info().channels, &img);
    });
  }
  DSPIPE_FUZZ_CHECK(!ds->Read(ds->size(), [](const RecordView&) { return Status::OK(); }).ok());
  return 0;
}
