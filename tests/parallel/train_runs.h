// `tessera train` runs for the multi-rank tests: a layout (ranks under mpirun, dp, ZeRO stage,
// micro-batch size, model, pipeline stages with their schedule and chunks per rank, blocks, extra
// flags, tensor-, expert- and context-parallel degrees) and a run of it on a token shard, with its metrics and final weights.
#pragma once

#include <cctype>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/model_presets.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {

struct Layout {
  int ranks;  // processes under mpirun (1 = no launcher)
  int dp;
  int zero;
  int micro_batch;
  const char* model = "gpt2-tiny";
  int pp = 1;
  const char* schedule = "1f1b";
  int virtual_stages = 1;
  int layers = 0;          // 0: the preset's
  const char* extra = "";  // more flags, e.g. "--recompute full"
  int tp = 1;
  int ep = 1;
  int cp = 1;
  bool moe() const { return model_preset(model).moe.enabled(); }
};

inline std::string layout_name(const Layout& l) {
  std::ostringstream s;
  std::string model = l.model;
  for (char& c : model)
    if (c == '-' || c == '.') c = '_';
  s << model << "_np" << l.ranks << "_dp" << l.dp << "_zero" << l.zero << "_micro" << l.micro_batch;
  if (l.layers > 0) s << "_L" << l.layers;
  if (l.tp > 1) s << "_tp" << l.tp;
  if (l.ep > 1) s << "_ep" << l.ep;
  if (l.cp > 1) s << "_cp" << l.cp;
  if (l.pp > 1) {
    std::string schedule = l.schedule;
    for (char& c : schedule)
      if (c == '-') c = '_';
    s << "_pp" << l.pp << "_" << schedule << "_v" << l.virtual_stages;
  }
  for (const char* c = l.extra; *c; ++c) s << (std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_');
  return s.str();
}

// gtest prints a row by its name instead of its bytes.
inline void PrintTo(const Layout& l, std::ostream* os) { *os << layout_name(l); }

struct RunResult {
  std::vector<nlohmann::json> metrics;
  std::vector<std::pair<std::string, std::vector<float>>> weights;  // the final checkpoint's tensors
};

// The command line that trains layout `l` in `dir` on `shard`, with `extra` flags. The comm timeout
// is generous: up to 12 ranks share 2 cores under `ctest -j2`, and a starved rank can wait minutes
// for its peers; ctest's 300 s timeout still ends a real hang.
inline std::string train_command(const Layout& l, const std::filesystem::path& dir, const std::string& shard,
                                 const std::string& extra) {
  std::ostringstream cmd;
  cmd << "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ";
  if (l.ranks > 1) cmd << "mpirun --oversubscribe --allow-run-as-root -np " << l.ranks << " ";
  cmd << TESSERA_EXE << " train --quiet --model " << l.model << " --train-data " << shard
      << " --batch-size 8 --seq-len 16 " << extra << " --lr 1e-3 --warmup 1 --min-lr 1e-4 --comm-timeout 240"
      << " --bucket-mb 0.01 --dp " << l.dp << " --zero " << l.zero << " --micro-batch-size " << l.micro_batch
      << " --out-dir " << dir.string();
  if (l.pp > 1)
    cmd << " --pp " << l.pp << " --pipeline-schedule " << l.schedule << " --virtual-stages " << l.virtual_stages;
  if (l.layers > 0) cmd << " --layers " << l.layers;
  if (l.tp > 1) cmd << " --tp " << l.tp;
  if (l.ep > 1) cmd << " --ep " << l.ep;
  if (l.cp > 1) cmd << " --cp " << l.cp;
  if (*l.extra) cmd << " " << l.extra;
  return cmd.str();
}

// Trains `layout` in `dir` on `shard` (with `extra` flags); returns its metrics and final weights.
inline RunResult train(const Layout& l, const std::filesystem::path& dir, const std::string& shard,
                       const std::string& extra = "--steps 4") {
  const std::string cmd = train_command(l, dir, shard, extra);
  testing::CommandResult r = testing::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  RunResult result;
  result.metrics = testing::read_metrics(dir / "metrics.jsonl");
  if (std::filesystem::exists(dir / "ckpt-latest" / "state.json"))
    result.weights = testing::checkpoint_tensors(dir / "ckpt-latest");
  return result;
}

}  // namespace tessera
