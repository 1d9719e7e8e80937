// Renders chat templates with Hugging Face's Jinja engine (the npm package @huggingface/jinja, the one
// transformers.js applies chat templates with), for test_chat_template_jinja.cpp.
// usage: node render_chat_template.js PACKAGE_DIR CASES.json OUT.json
//   CASES: [{"template": "...", "messages": [{"role", "content"}], "add_generation_prompt": bool,
//            "enable_thinking": bool (optional)}]
//   OUT: the rendered strings, in order.
'use strict';
const fs = require('fs');
const path = require('path');

const [packageDir, casesFile, outFile] = process.argv.slice(2);
const { Template } = require(path.resolve(packageDir, 'dist', 'index.cjs'));
const cases = JSON.parse(fs.readFileSync(casesFile, 'utf8'));
const rendered = cases.map((c) => {
  const context = { messages: c.messages, add_generation_prompt: c.add_generation_prompt };
  if ('enable_thinking' in c) context.enable_thinking = c.enable_thinking;
  return new Template(c.template).render(context);
});
fs.writeFileSync(outFile, JSON.stringify(rendered));
