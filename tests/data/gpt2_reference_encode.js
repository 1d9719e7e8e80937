// Encodes each string of a JSON array with the reference JavaScript GPT-2 encoder of the npm
// package gpt-3-encoder, for test_tokenizer_gpt2.cpp.
// usage: node gpt2_reference_encode.js PACKAGE_DIR TEXTS.json IDS.json
'use strict';
const fs = require('fs');
const path = require('path');

const [packageDir, textsFile, idsFile] = process.argv.slice(2);
const { encode } = require(path.resolve(packageDir, 'Encoder.js'));
const texts = JSON.parse(fs.readFileSync(textsFile, 'utf8'));
fs.writeFileSync(idsFile, JSON.stringify(texts.map((text) => encode(text))));
