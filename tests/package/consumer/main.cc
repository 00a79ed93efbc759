// SPDX-License-Identifier: Apache-2.0
// A training program's view of dspipe: only public headers, linked through find_package.
// The README's loader example is this program's loop.
#include <dspipe/convert.h>
#include <dspipe/loader.h>
#include <dspipe/synth.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  dspipe::SynthOptions so;
  so.out_dir = dir + "/src";
  so.count = 12;
  so.width = 32;
  so.height = 32;
  dspipe::Status s = dspipe::Synthesize(so);
  dspipe::BuildOptions bo;
  bo.source = so.out_dir;
  bo.output = dir + "/train.lmdb";
  dspipe::BuildResult br;
  if (s.ok()) s = dspipe::BuildDataset(bo, &br);

  dspipe::LoaderOptions opt;  // batch 8, threads = usable cores, prefetch 2, shuffled
  opt.augment.hflip = 0.5;    // joint image+mask augmentation
  opt.normalize = dspipe::NormalizeMode::kCpuFloat32;  // mean/std from the manifest
  std::unique_ptr<dspipe::Loader> loader;
  if (s.ok()) s = dspipe::Loader::Open(bo.output, opt, &loader);
  uint64_t seen = 0;
  for (uint64_t epoch = 0; s.ok() && epoch < 2; ++epoch) {
    loader->set_epoch(epoch);
    dspipe::Batch b;
    while ((s = loader->Next(&b)).ok() && !b.empty()) {
      seen += b.size();  // b.normalized(): float NCHW; b.masks(), b.labels(), b.indices()
    }
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::puts(dspipe::FormatTable(loader->stats().Summaries(), opt.batch_size).c_str());
  std::printf("consumer: %llu samples in 2 epochs\n", static_cast<unsigned long long>(seen));
  return seen == 24 ? 0 : 1;
}
