// The built-in chat templates: each message is a header (untrained), its content and its end of
// turn (trained for the assistant), and what follows the turn (untrained).
#include "data/chat_template.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/user_text.h"
#include "data/tokenizer.h"

namespace tessera {
namespace {

// The length of the whitespace character at the start of `text` (0: none), by Python's str.isspace(),
// which Jinja's trim filter strips with.
size_t leading_space(std::string_view text) {
  static constexpr std::string_view kSpaces[] = {
      " ", "\t", "\n", "\v", "\f", "\r", "\x1c", "\x1d", "\x1e", "\x1f", "\xC2\x85", "\xC2\xA0", "\xE1\x9A\x80",
      "\xE2\x80\x80", "\xE2\x80\x81", "\xE2\x80\x82", "\xE2\x80\x83", "\xE2\x80\x84", "\xE2\x80\x85",
      "\xE2\x80\x86", "\xE2\x80\x87", "\xE2\x80\x88", "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\xA8",
      "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
  for (std::string_view space : kSpaces)
    if (text.starts_with(space)) return space.size();
  return 0;
}

size_t trailing_space(std::string_view text) {
  for (size_t n = 1; n <= 3 && n <= text.size(); ++n)
    if (leading_space(text.substr(text.size() - n)) == n) return n;
  return 0;
}

// Python's str.lstrip('\n') and rstrip('\n'), which Qwen3's template applies to reasoning and content.
std::string_view lstrip_newlines(std::string_view text) {
  return text.substr(std::min(text.find_first_not_of('\n'), text.size()));
}
std::string_view rstrip_newlines(std::string_view text) { return text.substr(0, text.find_last_not_of('\n') + 1); }

// Jinja's `| trim`: whitespace off both ends.
std::string_view trimmed(std::string_view text) {
  while (size_t n = leading_space(text)) text.remove_prefix(n);
  while (size_t n = trailing_space(text)) text.remove_suffix(n);
  return text;
}

// Gemma's and Llama 2's turns: after the optional system message, user and assistant alternate.
void check_alternation(const std::string& name, const std::vector<ChatMessage>& messages, size_t first) {
  for (size_t i = first; i < messages.size(); ++i) {
    const bool user_turn = (i - first) % 2 == 0;
    TS_CHECK(messages[i].role == (user_turn ? "user" : "assistant"), "--chat-template ", name, ": message ", i + 1,
             " is ", quoted_text(messages[i].role, 40), " where the conversation's turns must alternate user, ",
             "assistant, user, ... (after one system message)");
  }
}

}  // namespace

ChatTemplate ChatTemplate::named(std::string_view name) {
  ChatTemplate t;
  t.name_ = std::string(name);
  if (name == "llama3") {
    t.before_role_ = "<|start_header_id|>";
    t.after_role_ = "<|end_header_id|>\n\n";
    t.end_of_turn_ = "<|eot_id|>";
    t.specials_ = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    t.trims_content_ = true;  // message['content'] | trim
  } else if (name == "chatml" || name == "qwen2.5" || name == "qwen3") {
    t.before_role_ = "<|im_start|>";
    t.after_role_ = "\n";
    t.end_of_turn_ = "<|im_end|>";
    t.after_turn_ = "\n";
    t.specials_ = {"<|im_start|>", "<|im_end|>"};
    t.groups_tool_results_ = name != "chatml";
    if (name == "qwen2.5") t.default_system_ = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    if (name == "qwen3") {
      t.thinks_ = true;
      t.specials_.insert(t.specials_.end(), {"<think>", "</think>"});
    }
  } else if (name == "phi3") {  // Phi-3 and Phi-3.5: a role's own token, a newline, <|end|> and a newline
    t.before_role_ = "<|";
    t.after_role_ = "|>\n";
    t.end_of_turn_ = "<|end|>";
    t.after_turn_ = "\n";
    t.specials_ = {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};
    t.knows_tool_ = false;
  } else if (name == "phi4") {  // Phi-4: ChatML with <|im_sep|> after the role and nothing between turns
    t.before_role_ = "<|im_start|>";
    t.after_role_ = "<|im_sep|>";
    t.end_of_turn_ = "<|im_end|>";
    t.specials_ = {"<|im_start|>", "<|im_sep|>", "<|im_end|>"};
  } else if (name == "olmo2") {  // OLMo 2 Instruct (Tulu 3): plain-text role markers, the end of text ending replies
    t.before_role_ = "<|";
    t.after_role_ = "|>\n";
    t.end_of_turn_ = "<|endoftext|>";
    t.after_turn_ = "\n";
    t.other_turn_end_ = "\n";
    t.last_turn_bare_ = true;
    t.knows_tool_ = false;
    t.specials_ = {"<|endoftext|>"};
  } else if (name == "gemma") {  // Gemma 2 and 3: the assistant is the "model", the system part of the first query
    t.before_role_ = "<start_of_turn>";
    t.after_role_ = "\n";
    t.end_of_turn_ = "<end_of_turn>";
    t.after_turn_ = "\n";
    t.assistant_role_ = "model";
    t.trims_content_ = true;
    t.folds_system_ = true;
    t.knows_tool_ = false;
    t.specials_ = {"<start_of_turn>", "<end_of_turn>"};
  } else if (name == "cohere") {  // Command-R and Aya: a token for each role
    t.before_role_ = "<|START_OF_TURN_TOKEN|>";
    t.end_of_turn_ = "<|END_OF_TURN_TOKEN|>";
    t.system_role_ = "<|SYSTEM_TOKEN|>";
    t.user_role_ = "<|USER_TOKEN|>";
    t.assistant_role_ = "<|CHATBOT_TOKEN|>";
    t.trims_content_ = true;  // content.strip()
    t.system_as_given_ = true;
    t.alternates_ = true;
    t.knows_tool_ = false;
    t.specials_ = {"<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>",
                   "<|CHATBOT_TOKEN|>"};
  } else if (name == "llama2" || name == "mistral" || name == "mistral-v3") {  // [INST] turns, the reply ended by </s>
    t.end_of_turn_ = "</s>";
    t.trims_content_ = name == "llama2";
    t.folds_system_ = true;
    t.knows_tool_ = false;
    t.specials_ = {"<s>", "</s>"};
    if (name == "llama2")
      t.inst_ = InstTurns{"[INST] ", "<s>[INST] ", " [/INST]", "<<SYS>>\n", "\n<</SYS>>\n\n", " </s>"};
    else if (name == "mistral")
      t.inst_ = InstTurns{" [INST] ", " [INST] ", " [/INST]", "", "\n\n", "</s>"};
    else
      t.inst_ = InstTurns{"[INST] ", "[INST] ", "[/INST]", "", "\n\n", "</s>", true, true};
    if (name == "mistral-v3") t.specials_.insert(t.specials_.end(), {"[INST]", "[/INST]"});
  } else {
    TS_FAIL("--chat-template: unknown template ", quoted_text(name), "; use ", kChatTemplateNames);
  }
  return t;
}

std::string_view ChatTemplate::role_text(std::string_view role) const {
  return role == "assistant" ? assistant_role_ : role == "user" ? user_role_ : role == "system" ? system_role_ : role;
}

std::string ChatTemplate::generation_prompt(bool thinking) const {
  if (inst_) return "";  // the reply follows the user's [/INST]
  std::string prompt(before_role_);
  prompt.append(assistant_role_).append(after_role_);
  if (thinks_ && !thinking) prompt.append("<think>\n\n</think>\n\n");
  return prompt;
}

std::vector<std::string_view> ChatTemplate::reply_ends() const {
  std::vector<std::string_view> ends = {end_of_turn_};
  for (std::string_view end : {"<|endoftext|>", "<|end_of_text|>", "<eos>"})
    if (end != end_of_turn_) ends.push_back(end);
  if (name_ == "llama3") ends.push_back("<|eom_id|>");
  return ends;
}

bool ChatTemplate::knows_role(std::string_view role) const {
  return role == "system" || role == "user" || role == "assistant" || (role == "tool" && knows_tool_) ||
         (name_ == "llama3" && role == "ipython");
}

std::string ChatTemplate::known_roles() const {
  return name_ == "llama3" ? "system, user, assistant, tool, ipython"
         : knows_tool_     ? "system, user, assistant, tool"
                           : "system, user, assistant";
}

void ChatTemplate::require_tokens_of(const Tokenizer& tokenizer) const {
  for (std::string_view special : specials_)
    TS_CHECK(tokenizer.special_token_id(special).has_value(), "--chat-template ", name_, ": the tokenizer (",
             tokenizer.source(), ") has no special token ", special, "; give the tokenizer of the model the template ",
             "is for");
}

ChatTemplate::Reply ChatTemplate::reply_of(const ChatMessage& m) {
  Reply reply{m.reasoning, m.content};
  const size_t close = reply.content.find("</think>");
  if (!m.reasoning.empty() || close == std::string_view::npos) return reply;
  // Qwen3's template: reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'),
  // content = content.split('</think>')[-1].lstrip('\n').
  reply.reasoning = reply.content.substr(0, close);
  if (const size_t open = reply.reasoning.rfind("<think>"); open != std::string_view::npos)
    reply.reasoning.remove_prefix(open + std::string_view("<think>").size());
  const size_t last_close = reply.content.rfind("</think>") + std::string_view("</think>").size();
  reply.content = lstrip_newlines(reply.content.substr(last_close));
  return reply;
}

std::vector<DocumentPiece> ChatTemplate::render_inst(const std::vector<ChatMessage>& messages) const {
  const bool folded = !messages.empty() && messages.front().role == "system";
  check_alternation(name_, messages, folded);
  // The user turn the system message opens: the first, or the last (the turns alternate from a user's).
  const size_t last_query = messages.size() - 1 - (messages.size() - folded + 1) % 2;
  const size_t system_turn = !folded ? messages.size() : inst_->system_on_last_query ? last_query : 1;
  std::vector<DocumentPiece> pieces;
  for (size_t i = folded; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const auto content = [&](std::string_view text) { return trims_content_ ? trimmed(text) : text; };
    if (m.role == "assistant") {  // (appended, not "a" + b: GCC 12's -Wrestrict)
      const std::string_view reply = inst_->trims_reply ? trimmed(m.content) : content(m.content);
      pieces.push_back({std::string(" ").append(reply).append(inst_->reply_end), true});
      continue;
    }
    const std::string query = i == system_turn ? std::string(inst_->system_before)
                                                     .append(messages.front().content)
                                                     .append(inst_->system_after)
                                                     .append(m.content)
                                               : m.content;
    std::string turn(i == size_t(folded) ? inst_->first_open : inst_->open);
    pieces.push_back({turn.append(content(query)).append(inst_->close), false});
  }
  return pieces;
}

std::vector<DocumentPiece> ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  if (inst_) return render_inst(messages);
  std::vector<DocumentPiece> pieces;
  size_t turns_left = messages.size();  // the messages still to render, this one included
  auto turn = [&](std::string_view role, std::string text) {
    std::string header(before_role_);
    header.append(role_text(role)).append(after_role_);
    const bool own_end = role == "assistant" || other_turn_end_.empty();
    text.append(own_end ? end_of_turn_ : other_turn_end_);
    pieces.push_back({std::move(header), false});
    pieces.push_back({std::move(text), role == "assistant"});
    if (own_end && !after_turn_.empty() && !(last_turn_bare_ && turns_left == 1))
      pieces.push_back({std::string(after_turn_), false});
  };
  if (!default_system_.empty() && (messages.empty() || messages.front().role != "system"))
    turn("system", std::string(default_system_));
  // Qwen3: the last user message that is not a tool result; the assistant turns after it think.
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t i = messages.size(); thinks_ && i-- > 0;) {
    const std::string& c = messages[i].content;
    if (messages[i].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  // Gemma: a system message opens the first user turn, and the turns alternate from a user's on.
  const bool folded = folds_system_ && !messages.empty() && messages.front().role == "system";
  std::string first_prefix = folded ? messages.front().content + "\n\n" : "";
  turns_left -= folded;
  if (folds_system_ || alternates_)
    check_alternation(name_, messages, !messages.empty() && messages.front().role == "system");
  for (size_t i = folded; i < messages.size(); ++i, --turns_left) {
    const ChatMessage& m = messages[i];
    if (groups_tool_results_ && m.role == "tool") {  // untrained, as any message but an assistant's
      std::string text = i == 0 || messages[i - 1].role != "tool" ? std::string(before_role_) + "user" : "";
      text.append("\n<tool_response>\n").append(m.content).append("\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") text.append("<|im_end|>\n");
      pieces.push_back({std::move(text), false});
    } else if (thinks_ && m.role == "assistant") {
      // The final turn thinks, empty-headed if need be; an earlier one after the query if it has a thought.
      const Reply reply = reply_of(m);
      const bool last = i + 1 == messages.size();
      if (i > last_query && (last || !reply.reasoning.empty())) {
        std::string text = "<think>\n";
        text.append(rstrip_newlines(lstrip_newlines(reply.reasoning))).append("\n</think>\n\n");
        turn(m.role, text.append(lstrip_newlines(reply.content)));
      } else {
        turn(m.role, std::string(reply.content));
      }
    } else {
      const bool trims = trims_content_ && !(system_as_given_ && m.role == "system");
      const std::string_view content = trims ? trimmed(m.content) : std::string_view(m.content);
      turn(m.role, std::exchange(first_prefix, "") + std::string(content));
    }
  }
  return pieces;
}

}  // namespace tessera
