// A training program's view of dspipe: only public headers, linked through find_package.
#include <dspipe/convert.h>
#include <dspipe/dataset.h>
#include <dspipe/synth.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  dspipe::SynthOptions so;
  so.out_dir = dir + "/src";
  so.count = 4;
  so.width = 32;
  so.height = 32;
  dspipe::Status s = dspipe::Synthesize(so);
  dspipe::BuildOptions bo;
  bo.source = so.out_dir;
  bo.output = dir + "/db.lmdb";
  dspipe::BuildResult br;
  if (s.ok()) s = dspipe::BuildDataset(bo, &br);
  std::unique_ptr<dspipe::Dataset> ds;
  if (s.ok()) s = dspipe::Dataset::Open(bo.output, {}, &ds);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("consumer: %llu records\n", static_cast<unsigned long long>(ds->size()));
  return ds->size() == 4 ? 0 : 1;
}
