// Loads a tokenizer.json with Hugging Face's tokenizers (npm package; the Rust library inside) and
// encodes each string of a JSON array, for the tokenizer tests. Special tokens are added as the
// post-processor says (add_special_tokens), unless --plain is given.
// usage: node hf_tokenizers_encode.js PACKAGE_DIR tokenizer.json [--plain] TEXTS.json IDS.json
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [packageDir, tokenizerFile, ...rest] = process.argv.slice(2);
  const plain = rest[0] === '--plain';
  const [textsFile, idsFile] = plain ? rest.slice(1) : rest;
  const { Tokenizer } = require(path.resolve(packageDir));
  const tokenizer = Tokenizer.fromFile(tokenizerFile);
  const texts = JSON.parse(fs.readFileSync(textsFile, 'utf8'));
  const ids = [];
  for (const text of texts) {
    const encoding = await tokenizer.encode(text, null, { addSpecialTokens: !plain });
    ids.push(Array.from(encoding.getIds()));
  }
  fs.writeFileSync(idsFile, JSON.stringify(ids));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
