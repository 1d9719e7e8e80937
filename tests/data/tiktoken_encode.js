// OpenAI's tiktoken (npm package; the Rust library compiled to WebAssembly) for
// test_tokenizer_tiktoken.cpp: writes an encoding's rank file ("<base64 bytes> <rank>" per line, the
// format of cl100k_base.tiktoken), or encodes each string of a JSON array with every special token
// allowed.
// usage: node tiktoken_encode.js PACKAGE_DIR ENCODING --ranks OUT.tiktoken
//        node tiktoken_encode.js PACKAGE_DIR ENCODING --encode TEXTS.json IDS.json
'use strict';
const fs = require('fs');
const path = require('path');

const [packageDir, encodingName, mode, ...files] = process.argv.slice(2);
const { get_encoding } = require(path.resolve(packageDir, 'tiktoken.cjs'));
const encoding = get_encoding(encodingName);

if (mode === '--ranks') {
  // token_byte_values lists the regular tokens (not the special ones), sorted by their bytes.
  const ranked = encoding.token_byte_values().map((bytes) => {
    const array = Uint8Array.from(bytes);
    return [encoding.encode_single_token(array), Buffer.from(array).toString('base64')];
  });
  ranked.sort((a, b) => a[0] - b[0]);
  fs.writeFileSync(files[0], ranked.map(([rank, text]) => `${text} ${rank}\n`).join(''));
} else {
  const texts = JSON.parse(fs.readFileSync(files[0], 'utf8'));
  fs.writeFileSync(files[1], JSON.stringify(texts.map((text) => Array.from(encoding.encode(text, 'all')))));
}
