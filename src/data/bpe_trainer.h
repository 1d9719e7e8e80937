// Byte-level BPE training: the vocabulary starts as the 256 bytes (id = byte value); each step
// merges the most frequent adjacent pair over the GPT-2 pre-tokenised words of the corpus into a
// new token; <|endoftext|> takes the last id. Deterministic: equal counts go to the pair with the
// smaller (left id, right id).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include "data/document_reader.h"
#include "data/tokenizer.h"

namespace tessera {

// Learns vocab_size - 257 merges from the corpus files' documents (`documents` says how the files
// hold them, data/document_reader.h; <|endoftext|> in a text is a document boundary too, never part
// of a merge). Stops early, with a smaller vocabulary, when the corpus has no adjacent pair left to
// merge. `progress`, when set, is called after every merge.
Tokenizer train_bpe(const std::vector<std::filesystem::path>& text_files, int64_t vocab_size,
                    const std::function<void(int64_t merges_done, int64_t merges_total)>& progress = {},
                    const DocumentOptions& documents = {});

}  // namespace tessera
