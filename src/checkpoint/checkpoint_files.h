// The safetensors files of a sharded checkpoint. The writer puts each tensor's block CRC-32s (see
// file_checksum.h) into the header's metadata ("crc32:<tensor>": comma-separated hex), computed from
// memory before the bytes go out; the rank that commits then builds the index and every file's CRC-32
// from the headers alone (a file's CRC joins its header's with its tensors', which lie back to back),
// without reading the data the other ranks wrote.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/safetensors.h"

namespace tessera {

// write_safetensors with the block CRCs of every entry added to `metadata`.
void write_checkpoint_file(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& entries,
                           std::map<std::string, std::string> metadata = {});

// Adds the tensors of folder/file (written by write_checkpoint_file) to `index`: a tensor stored
// whole under its name, or elements [begin, end) stored as "name[begin:end]" (its shape is left for
// the caller to fill in). Returns the file's size and CRC-32.
FileDigest index_written_file(const std::filesystem::path& folder, const std::string& file, CheckpointIndex& index);

}  // namespace tessera
