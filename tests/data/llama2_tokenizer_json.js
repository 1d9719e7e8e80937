// Writes a tokenizer.json in the layout of Meta's Llama 2 release on Hugging Face (SentencePiece's
// BPE with byte_fallback; normalizer Prepend "▁" then Replace " " -> "▁", no pre-tokenizer; decoder
// Replace, ByteFallback, Fuse, Strip; <s> prepended by TemplateProcessing; merges as "left right"
// strings) from the vocabulary and merges baked into the npm package llama-tokenizer-js, for
// test_tokenizer_llama2.cpp. With --gemma-form the same vocabulary comes in Gemma's layout instead:
// Replace alone (no space prepended), a Split on " " (which finds none left), no Strip in the
// decoder, ignore_merges: false and merges as [left, right] pairs. Also encodes texts with that
// package (without <s>; with its leading space only in Llama 2's form).
// usage: node llama2_tokenizer_json.js PACKAGE_DIR [--gemma-form] tokenizer.json
//        node llama2_tokenizer_json.js PACKAGE_DIR [--gemma-form] --encode TEXTS.json IDS.json
'use strict';
const fs = require('fs');
const path = require('path');
const { pathToFileURL } = require('url');

const SPECIALS = 3;  // <unk>, <s>, </s>
const METASPACE = '\u2581';

function tokenizerJson(tokenizer, gemma) {
  const byId = tokenizer.vocabById;
  const vocab = {};
  byId.forEach((token, id) => { vocab[token] = id; });
  // The package keeps its merges as a Map "left right" -> priority, inserted in rank order (no
  // token holds a space).
  const merges = Array.from(tokenizer.merges.keys(), (key) => (gemma ? key.split(' ') : key));
  const added = byId.slice(0, SPECIALS).map((content, id) => (
    { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  const replace = { type: 'Replace', pattern: { String: ' ' }, content: METASPACE };
  const decoders = [
    { type: 'Replace', pattern: { String: METASPACE }, content: ' ' },
    { type: 'ByteFallback' },
    { type: 'Fuse' },
  ];
  if (!gemma) decoders.push({ type: 'Strip', content: ' ', start: 1, stop: 0 });
  const bos = byId[1];
  const model = { type: 'BPE', dropout: null, unk_token: byId[0], continuing_subword_prefix: null,
                  end_of_word_suffix: null, fuse_unk: true, byte_fallback: true };
  if (gemma) model.ignore_merges = false;  // Llama 2's file predates the option
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: gemma ? replace
                      : { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: METASPACE }, replace] },
    pre_tokenizer: gemma ? { type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithPrevious', invert: false }
                         : null,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
             { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { [bos]: { id: bos, ids: [1], tokens: [bos] } },
    },
    decoder: { type: 'Sequence', decoders },
    model: Object.assign(model, { vocab, merges }),
  };
}

async function main() {
  const [packageDir, ...rest] = process.argv.slice(2);
  const gemma = rest[0] === '--gemma-form';
  const args = gemma ? rest.slice(1) : rest;
  const { default: tokenizer } =
    await import(pathToFileURL(path.resolve(packageDir, 'llama-tokenizer.js')).href);
  if (args[0] === '--encode') {
    const texts = JSON.parse(fs.readFileSync(args[1], 'utf8'));
    const ids = texts.map((text) => tokenizer.encode(text, false, !gemma));  // add_bos_token, add_preceding_space
    fs.writeFileSync(args[2], JSON.stringify(ids));
  } else {
    fs.writeFileSync(args[0], JSON.stringify(tokenizerJson(tokenizer, gemma)));
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
