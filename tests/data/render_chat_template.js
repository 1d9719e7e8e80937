// Renders chat templates with Hugging Face's Jinja engine (the npm package @huggingface/jinja, the one
// transformers.js applies chat templates with), for test_chat_template_jinja.cpp.
// usage: node render_chat_template.js PACKAGE_DIR CASES.json OUT.json
//   CASES: [{"template": "...", "messages": [{"role", "content"}], "add_generation_prompt": bool}]
//   OUT: the rendered strings, in order.
'use strict';
const fs = require('fs');
const path = require('path');

const [packageDir, casesFile, outFile] = process.argv.slice(2);
const { Template } = require(path.resolve(packageDir, 'dist', 'index.cjs'));
const cases = JSON.parse(fs.readFileSync(casesFile, 'utf8'));
const rendered = cases.map((c) => new Template(c.template).render({
  messages: c.messages,
  add_generation_prompt: c.add_generation_prompt,
}));
fs.writeFileSync(outFile, JSON.stringify(rendered));
