// Loads a tokenizer.json with Hugging Face's tokenizers (npm package; the Rust library inside) and
// encodes each string of a JSON array, for test_tokenizer_gpt2.cpp.
// usage: node hf_tokenizers_encode.js PACKAGE_DIR tokenizer.json TEXTS.json IDS.json
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [packageDir, tokenizerFile, textsFile, idsFile] = process.argv.slice(2);
  const { Tokenizer } = require(path.resolve(packageDir));
  const tokenizer = Tokenizer.fromFile(tokenizerFile);
  const texts = JSON.parse(fs.readFileSync(textsFile, 'utf8'));
  const ids = [];
  for (const text of texts) ids.push(Array.from((await tokenizer.encode(text)).getIds()));
  fs.writeFileSync(idsFile, JSON.stringify(ids));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
