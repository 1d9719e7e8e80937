// The built-in chat templates: each message is a header (untrained), its content and its end of
// turn (trained for the assistant), and what follows the turn (untrained).
#include "data/chat_template.h"

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

// Jinja's `| trim`: whitespace off both ends.
std::string_view trimmed(std::string_view text) {
  while (size_t n = leading_space(text)) text.remove_prefix(n);
  while (size_t n = trailing_space(text)) text.remove_suffix(n);
  return text;
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
  } else if (name == "chatml" || name == "qwen2.5") {
    t.before_role_ = "<|im_start|>";
    t.after_role_ = "\n";
    t.end_of_turn_ = "<|im_end|>";
    t.after_turn_ = "\n";
    t.specials_ = {"<|im_start|>", "<|im_end|>"};
    if (name == "qwen2.5") t.default_system_ = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
  } else {
    TS_FAIL("--chat-template: unknown template ", quoted_text(name), "; use llama3, chatml or qwen2.5");
  }
  return t;
}

std::string ChatTemplate::generation_prompt() const {
  std::string prompt(before_role_);
  prompt.append("assistant").append(after_role_);
  return prompt;
}

std::vector<std::string_view> ChatTemplate::reply_ends() const {
  std::vector<std::string_view> ends = {end_of_turn_, "<|endoftext|>", "<|end_of_text|>"};
  if (name_ == "llama3") ends.push_back("<|eom_id|>");
  return ends;
}

bool ChatTemplate::knows_role(std::string_view role) const {
  return role == "system" || role == "user" || role == "assistant" || role == "tool" ||
         (name_ == "llama3" && role == "ipython");
}

std::string ChatTemplate::known_roles() const {
  return name_ == "llama3" ? "system, user, assistant, tool, ipython" : "system, user, assistant, tool";
}

void ChatTemplate::require_tokens_of(const Tokenizer& tokenizer) const {
  for (std::string_view special : specials_)
    TS_CHECK(tokenizer.special_token_id(special).has_value(), "--chat-template ", name_, ": the tokenizer (",
             tokenizer.source(), ") has no special token ", special, "; give the tokenizer of the model the template ",
             "is for");
}

std::vector<DocumentPiece> ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  std::vector<DocumentPiece> pieces;
  auto turn = [&](std::string_view role, std::string_view content) {
    std::string header(before_role_);
    header.append(role).append(after_role_);
    std::string text(trims_content_ ? trimmed(content) : content);
    text.append(end_of_turn_);
    pieces.push_back({std::move(header), false});
    pieces.push_back({std::move(text), role == "assistant"});
    if (!after_turn_.empty()) pieces.push_back({std::string(after_turn_), false});
  };
  if (!default_system_.empty() && (messages.empty() || messages.front().role != "system"))
    turn("system", default_system_);
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  return pieces;
}

}  // namespace tessera
