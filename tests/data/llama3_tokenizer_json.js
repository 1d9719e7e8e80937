// Writes a tokenizer.json in the layout of Meta's Llama 3 release (Split regex + ByteLevel
// pre-tokenizer, ignore_merges, <|begin_of_text|> prepended by TemplateProcessing, merges as
// [left, right] pairs) from the vocabulary and merges baked into the npm package
// llama3-tokenizer-js, for test_tokenizer_llama3.cpp. Also encodes texts with that package.
// usage: node llama3_tokenizer_json.js PACKAGE_DIR tokenizer.json
//        node llama3_tokenizer_json.js PACKAGE_DIR --encode TEXTS.json IDS.json
'use strict';
const fs = require('fs');
const path = require('path');

const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" +
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const REGULAR_TOKENS = 128000;

const [packageDir, ...rest] = process.argv.slice(2);
const { llama3Tokenizer } =
  require(path.resolve(packageDir, 'bundle', 'commonjs-llama3-tokenizer-with-baked-data.cjs'));

function tokenizerJson() {
  const byId = llama3Tokenizer.vocabById;
  const vocab = {};
  for (let id = 0; id < REGULAR_TOKENS; id++) vocab[byId[id]] = id;
  // The package keeps its merges as a Map "left right" -> priority, inserted in rank order.
  const merges = Array.from(llama3Tokenizer.merges.keys(), (key) => key.split(' '));
  const added = [];
  for (let id = REGULAR_TOKENS; id < byId.length; id++) {
    added.push({ id, content: byId[id], single_word: false, lstrip: false, rstrip: false, normalized: false,
                 special: true });
  }
  const byteLevel = (extra) => Object.assign({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true,
                                               use_regex: true }, extra);
  const bos = '<|begin_of_text|>';
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: LLAMA3_PATTERN }, behavior: 'Isolated', invert: false },
        byteLevel({ use_regex: false }),
      ],
    },
    post_processor: {
      type: 'Sequence',
      processors: [
        byteLevel({ add_prefix_space: true, trim_offsets: false }),
        {
          type: 'TemplateProcessing',
          single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
          pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
                 { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
          special_tokens: { [bos]: { id: bos, ids: [byId.indexOf(bos)], tokens: [bos] } },
        },
      ],
    },
    decoder: byteLevel({ add_prefix_space: true }),
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges },
  };
}

if (rest[0] === '--encode') {
  const texts = JSON.parse(fs.readFileSync(rest[1], 'utf8'));
  const ids = texts.map((text) => llama3Tokenizer.encode(text, { bos: false, eos: false }));
  fs.writeFileSync(rest[2], JSON.stringify(ids));
} else {
  fs.writeFileSync(rest[0], JSON.stringify(tokenizerJson()));
}
