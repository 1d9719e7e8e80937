// tessera eval: mean loss of a checkpoint (or Hugging Face model) over token shards, and its accuracy
// on a multiple-choice file (HellaSwag).
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "checkpoint/hf_model.h"
#include "commands.h"
#include "core/user_text.h"
#include "data/choice_examples.h"
#include "data/data_mixture.h"
#include "data/document_starts.h"
#include "data/tokenizer.h"
#include "train/choice_eval.h"
#include "train/device_choice.h"
#include "train/model_setup.h"

namespace tessera::cli {
namespace {

struct EvalOptions {
  std::string checkpoint, init_from, tokenizer, data, choices;
  int64_t batch_size = 8, seq_len = 0, batches = 0;
  std::string device = "auto", attention_mask = "causal";
};

// Prints the mean loss over each source of --val-data (and their weighted mean for a mixture).
void print_val_loss(Decoder& model, const LoadedModel& loaded, const EvalOptions& o) {
  const bool by_document = o.attention_mask == "document";
  // A mixture's loss is its sources' weighted mean; each source is evaluated alone.
  const std::vector<DataSource> sources = parse_data_sources(o.data, "--val-data");
  Tensor inputs = Tensor::zeros({o.batch_size, o.seq_len}, DType::i32);
  Tensor targets = Tensor::zeros({o.batch_size, o.seq_len}, DType::i32);
  double mixture_loss = 0;
  for (const DataSource& source : sources) {
    const DataMixture data(source.glob, model.config().vocab_size, o.batch_size, o.seq_len, DataOrder::sequential,
                           0, "--val-data");
    const int64_t batches =
        o.batches > 0 ? std::min(o.batches, data.batches_per_epoch()) : data.batches_per_epoch();
    // The mean over the batches' training targets: every token, or those the loss masks keep.
    double sum = 0;
    int64_t trained = 0;
    for (int64_t k = 0; k < batches; ++k) {
      data.fill(k, 0, o.batch_size, inputs.data<int32_t>(), targets.data<int32_t>());
      const Tensor doc_starts =
          by_document ? document_starts(inputs, loaded.tokenizer->document_start_token()) : Tensor();
      sum += double(model.forward(inputs, targets, 0.0f, doc_starts)) * double(o.batch_size * o.seq_len);
      trained += data.count_trained(k, 0, o.batch_size);
    }
    const double loss = sum / double(std::max<int64_t>(trained, 1));
    mixture_loss += source.weight * loss;
    std::printf("%s%sval_loss %.6f over %lld batches of %lld x %lld tokens", sources.size() > 1 ? source.glob.c_str() : "",
                sources.size() > 1 ? ": " : "", loss, (long long)batches, (long long)o.batch_size,
                (long long)o.seq_len);
    if (trained < batches * o.batch_size * o.seq_len) std::printf(" (%lld targets under loss masks)", (long long)trained);
    if (o.batches > batches)
      std::printf(" (all the data holds, short of --batches %lld)", (long long)o.batches);
    std::printf("\n");
  }
  if (sources.size() > 1) std::printf("val_loss %.6f: the sources' weighted mean\n", mixture_loss);
}

// Scores the examples, saying how far it got every 10 seconds on stderr, and prints the accuracies.
void print_choice_accuracy(Decoder& model, const std::vector<ChoiceExample>& examples, const std::string& file,
                           int64_t batch_rows, int64_t window) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  const auto progress = [&](int64_t scored) {
    if (Clock::now() - last < std::chrono::seconds(10) || scored == int64_t(examples.size())) return;
    last = Clock::now();
    std::fprintf(stderr, "scored %lld of %lld examples (%.0f s)\n", (long long)scored, (long long)examples.size(),
                 std::chrono::duration<double>(last - start).count());
  };
  const ChoiceAccuracy accuracy =
      choice_accuracy(examples, choice_losses(model, examples, batch_rows, window, progress));
  std::printf("%s: acc %.4f acc_norm %.4f loss %.4f over %lld examples (acc: lowest summed loss; acc_norm: lowest "
              "loss per token; loss: the right choices' per token; a guess: %.4f)\n", quoted_text(file).c_str(),
              accuracy.accuracy(), accuracy.accuracy_norm(), accuracy.right_loss(), (long long)accuracy.examples,
              accuracy.chance());
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = add_command(app, "eval", "Evaluate a model: its loss on token shards, its accuracy on multiple-choice examples");
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint folder or run folder (its ckpt-latest)");
  cmd->add_option("--init-from", o->init_from,
                  "Hugging Face folder (" TESSERA_HF_FAMILIES ") instead of --checkpoint (a Tessera checkpoint or run "
                  "folder reads too, as train's --init-from)");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Tokenizer for --choices and --attention-mask document, as train's --tokenizer (default: the one "
                  "beside the model's weights)");
  cmd->add_option("--val-data", o->data, "Glob of token shards, or weighted globs: 0.7:web/val_*.bin,0.3:code/val_*.bin");
  cmd->add_option("--choices", o->choices, "Multiple-choice JSON lines to score, such as HellaSwag's "
                  "hellaswag_val.jsonl (\"ctx\", \"endings\", \"label\"; or \"context\", \"choices\", \"label\")");
  cmd->add_option("--batch-size", o->batch_size, "Sequences per forward pass (--choices: at least this many rows, one per "
                  "choice, whole examples at a time)")->capture_default_str();
  cmd->add_option("--seq-len", o->seq_len, "Tokens per sequence (0 = a checkpoint's training --seq-len, else the model's "
                  "context); --choices cuts a longer context from its start to fit")->capture_default_str();
  cmd->add_option("--batches,--eval-batches", o->batches, "Batches to evaluate (0 = the whole data once; train's "
                  "--eval-batches with --batch-size its --micro-batch-size gives its val_loss)")->capture_default_str();
  cmd->add_option("--device", o->device, "auto (the GPU when one is usable, else the CPU), cuda or cpu")
      ->capture_default_str();
  cmd->add_option("--attention-mask", o->attention_mask,
                  "causal (the whole window) or document (each token within its document, as train's flag)")
      ->capture_default_str();
  enable_toml_config(*cmd);
  cmd->callback([o, cmd] {
    apply_toml_config(*cmd);
    TS_CHECK(o->batch_size > 0, "--batch-size must be positive, got ", o->batch_size);
    TS_CHECK(o->seq_len >= 0, "--seq-len must not be negative (0 = the training's, or the model's context), got ", o->seq_len);
    TS_CHECK(o->batches >= 0, "--batches must not be negative, got ", o->batches);
    TS_CHECK(o->attention_mask == "causal" || o->attention_mask == "document",
             "--attention-mask must be causal or document, got '", o->attention_mask, "'");
    if (o->data.empty() && o->choices.empty())  // a required flag missing: exit 2, as CLI11's are
      throw ConfigError("eval: give --val-data (token shards: the loss) or --choices (a multiple-choice file: the "
                        "accuracy), or both", "");
    LoadedModel loaded = load_model_for_inference(o->checkpoint, o->init_from, o->tokenizer);
    Decoder& model = *loaded.model;
    const bool by_document = o->attention_mask == "document";
    const auto require_tokenizer = [&](const char* flag, const char* use) {
      TS_CHECK(loaded.tokenizer, flag, " needs the model's tokenizer (", use, "); pass --tokenizer (",
               loaded.tokenizer_note.empty() ? "none is stored beside the weights" : loaded.tokenizer_note, ")");
    };
    if (by_document) require_tokenizer("--attention-mask document", "its document start token marks the documents");
    std::vector<ChoiceExample> examples;  // read before the model moves: a defect is refused at once
    if (!o->choices.empty()) {
      require_tokenizer("--choices", "the examples are text");
      TS_CHECK(loaded.tokenizer->vocab_size() <= model.config().vocab_size, "--tokenizer has ",
               loaded.tokenizer->vocab_size(), " tokens, more than the model's vocabulary of ",
               model.config().vocab_size, "; give the tokenizer the model was trained with");
      examples = read_choice_examples(o->choices, *loaded.tokenizer);
    }
    model.to(choose_device_noting(o->device, model.config()).device);
    const int64_t context = model.config().max_seq_len;
    // By default the sequences the model was trained on (its val_loss's), else its whole context.
    if (o->seq_len == 0)
      o->seq_len = loaded.trained_seq_len > 0 ? std::min(loaded.trained_seq_len, context) : context;
    TS_CHECK(o->seq_len <= context, "--seq-len ", o->seq_len, " exceeds the model's context of ", context,
             "; give --seq-len ", context, " or less");
    if (!o->data.empty()) print_val_loss(model, loaded, *o);
    if (!o->choices.empty())
      print_choice_accuracy(model, examples, o->choices, o->batch_size, o->seq_len);
  });
}

}  // namespace tessera::cli
