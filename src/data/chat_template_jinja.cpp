// The built-in chat templates written as Jinja for a Hugging Face export's tokenizer_config.json,
// generated from the same fields render() reads, so transformers' apply_chat_template gives the text
// Tessera trained on: the document's start token, then the conversation's pieces. (Strings are built
// with append: GCC 12's -Wrestrict misfires on "literal" + std::string.)
#include <string>

#include "core/error.h"
#include "data/chat_template.h"

namespace tessera {
namespace {

// A Jinja string literal of `text`.
std::string quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\n') {
      out.append("\\n");
      continue;
    }
    if (c == '\\' || c == '\'') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

// The messages after an optional system message (`list`: a Jinja expression of them) checked to alternate user,
// assistant, ... as render() checks them.
std::string alternation(const std::string& name, const char* list) {
  std::string message = "--chat-template ";
  message.append(name).append(
      ": the conversation's turns must alternate user, assistant, user, ... (after one system message)");
  std::string j = "{%- for message in ";
  j.append(list).append(" -%}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}{{- raise_exception(");
  j.append(quoted(message)).append(") -}}{%- endif -%}{%- endfor -%}");
  return j;
}

// The system message taken out of `messages` into `system` (has_system), the rest in `turns`, which alternate.
std::string folded_system_and_alternation(const std::string& name) {
  std::string j = "{%- if messages and messages[0]['role'] == 'system' -%}{%- set has_system = true -%}";
  j.append("{%- set system = messages[0]['content'] -%}{%- set turns = messages[1:] -%}");
  j.append("{%- else -%}{%- set has_system = false -%}{%- set system = '' -%}{%- set turns = messages -%}");
  return j.append("{%- endif -%}").append(alternation(name, "turns"));
}

}  // namespace

std::string ChatTemplate::jinja(std::string_view start_text) const {
  const std::string content = trims_content_ ? "(message['content'] | trim)" : "message['content']";
  std::string j = "{{- ";
  j.append(quoted(start_text)).append(" -}}");
  if (inst_) {
    // The user turn the system message opens: the first, or the last.
    const char* system_turn = inst_->system_on_last_query ? "loop.index0 == ns.last_query" : "loop.first";
    std::string query = "((";
    query.append(quoted(inst_->system_before)).append(" + system + ").append(quoted(inst_->system_after));
    query.append(" + message['content']) if (").append(system_turn).append(" and has_system) else message['content'])");
    if (trims_content_) query = std::string("(").append(query).append(" | trim)");
    j.append(folded_system_and_alternation(name_));
    if (inst_->system_on_last_query) {
      j.append("{%- set ns = namespace(last_query=-1) -%}{%- for message in turns -%}");
      j.append("{%- if message['role'] == 'user' -%}{%- set ns.last_query = loop.index0 -%}{%- endif -%}");
      j.append("{%- endfor -%}");
    }
    const std::string reply = inst_->trims_reply ? "(message['content'] | trim)" : content;
    j.append("{%- for message in turns -%}{%- if message['role'] == 'assistant' -%}{{- ' ' + ").append(reply);
    j.append(" + ").append(quoted(inst_->reply_end)).append(" -}}{%- else -%}{{- (");
    j.append(quoted(inst_->first_open)).append(" if loop.first else ").append(quoted(inst_->open)).append(") + ");
    j.append(query).append(" + ").append(quoted(inst_->close)).append(" -}}{%- endif -%}{%- endfor -%}");
    return j;  // the reply follows the user's [/INST]: no generation prompt
  }
  if (folds_system_) {
    j.append(folded_system_and_alternation(name_));
  } else {
    j.append("{%- set has_system = false -%}{%- set system = '' -%}{%- set turns = messages -%}");
    if (alternates_)  // Cohere's: the system message a turn of its own, then the turns alternate
      j.append(alternation(name_, "(messages[1:] if messages and messages[0]['role'] == 'system' else messages)"));
  }
  if (!default_system_.empty()) {  // Qwen2.5's, unless the conversation opens with its own
    std::string turn(before_role_);
    turn.append("system").append(after_role_).append(default_system_).append(end_of_turn_).append(after_turn_);
    j.append("{%- if not messages or messages[0]['role'] != 'system' -%}{{- ").append(quoted(turn));
    j.append(" -}}{%- endif -%}");
  }
  const std::string_view other_end = other_turn_end_.empty() ? end_of_turn_ : other_turn_end_;
  if (thinks_) {  // Qwen3: the last user query that is not a tool result
    j.append("{%- set ns = namespace(last_query=(messages | length) - 1) -%}{%- for message in messages -%}");
    j.append("{%- if message['role'] == 'user' and not (message['content'].startswith('<tool_response>') and ");
    j.append("message['content'].endswith('</tool_response>')) -%}{%- set ns.last_query = loop.index0 -%}");
    j.append("{%- endif -%}{%- endfor -%}");
  }
  j.append("{%- for message in turns -%}");
  if (groups_tool_results_) {  // consecutive tool results share a user turn, each in <tool_response>
    std::string open(before_role_), close(end_of_turn_);
    open.append("user");
    close.append(after_turn_);
    j.append("{%- if message['role'] == 'tool' -%}");
    j.append("{%- if loop.first or turns[loop.index0 - 1]['role'] != 'tool' -%}{{- ").append(quoted(open));
    j.append(" -}}{%- endif -%}{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' -}}");
    j.append("{%- if loop.last or turns[loop.index0 + 1]['role'] != 'tool' -%}{{- ").append(quoted(close));
    j.append(" -}}{%- endif -%}{%- else -%}");
  }
  j.append("{%- set text = ").append(content).append(" -%}");
  if (system_as_given_)
    j.append("{%- if message['role'] == 'system' -%}{%- set text = message['content'] -%}{%- endif -%}");
  if (thinks_) {  // reasoning_content, or what the content holds before </think>; a think block after the query
    j.append("{%- if message['role'] == 'assistant' -%}{%- set reasoning = '' -%}");
    j.append("{%- if message['reasoning_content'] is string and message['reasoning_content'] -%}");
    j.append("{%- set reasoning = message['reasoning_content'] -%}{%- elif '</think>' in text -%}");
    j.append("{%- set reasoning = text.split('</think>')[0].split('<think>')[-1] -%}");
    j.append("{%- set text = text.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}");
    j.append("{%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}");
    j.append("{%- set text = '<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + text.lstrip('\\n') -%}");
    j.append("{%- endif -%}{%- endif -%}");
  }
  j.append("{{- ").append(quoted(before_role_)).append(" + (");
  j.append(quoted(assistant_role_)).append(" if message['role'] == 'assistant' else ");
  if (user_role_ != "user" || system_role_ != "system") {  // Cohere's role tokens
    j.append("(").append(quoted(user_role_)).append(" if message['role'] == 'user' else (");
    j.append(quoted(system_role_));
    j.append(" if message['role'] == 'system' else message['role']))");
  } else {
    j.append("message['role']");
  }
  j.append(") + ");
  j.append(quoted(after_role_)).append(" + (system + '\\n\\n' if (loop.first and has_system) else '') + text");
  j.append(" -}}{%- if message['role'] == 'assistant' -%}{{- ").append(quoted(end_of_turn_));
  j.append(" -}}{%- else -%}{{- ").append(quoted(other_end)).append(" -}}{%- endif -%}");
  if (!after_turn_.empty()) {
    j.append("{%- if (").append(other_turn_end_.empty() ? "true" : "message['role'] == 'assistant'").append(")");
    j.append(last_turn_bare_ ? " and not loop.last" : "").append(" -%}{{- ").append(quoted(after_turn_));
    j.append(" -}}{%- endif -%}");
  }
  if (groups_tool_results_) j.append("{%- endif -%}");
  j.append("{%- endfor -%}{%- if add_generation_prompt -%}{{- ").append(quoted(generation_prompt()));
  if (thinks_) {  // Qwen3's enable_thinking=false: an empty think block opens the reply
    j.append(" -}}{%- if enable_thinking is defined and enable_thinking is false -%}{{- ");
    j.append(quoted(generation_prompt(false).substr(generation_prompt().size())));
    j.append(" -}}{%- endif -%}{%- endif -%}");
    return j;
  }
  j.append(" -}}{%- endif -%}");
  return j;
}

}  // namespace tessera
