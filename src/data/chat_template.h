// Chat templates for supervised fine-tuning on conversations: a JSON lines record holds a list of
// messages ({"role": ..., "content": ...}), which a template renders as Hugging Face's chat
// templates do, cut into pieces that are training targets (an assistant's content and the token
// ending its turn) or not (everything else). Built in, as the Jinja templates cannot run here:
//   llama3: <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>   (after the BOS; CONTENT
//           without whitespace at its ends, as Llama 3's and 3.1's templates trim it)
//   chatml: <|im_start|>ROLE\nCONTENT<|im_end|>\n                            (Qwen and others)
//   qwen2.5: chatml, and Qwen2.5-Instruct's system message when a conversation has none
//   qwen3:   chatml; an assistant's turn after the last user query opens with its reasoning in
//            <think>\n...\n</think>\n\n (the final turn always, empty when it has none; the
//            reasoning is a message's "reasoning_content", or what its content holds before
//            </think>), and earlier turns keep only the content after their </think>
// qwen2.5 and qwen3 put tool results into user turns, each in <tool_response>\n...\n</tool_response>,
// consecutive ones sharing a turn, as their templates do.
//   phi3:    <|ROLE|>\nCONTENT<|end|>\n       (Phi-3, Phi-3.5; its template's closing end-of-text, an
//            untrained token after the last turn, is left out)
//   phi4:    <|im_start|>ROLE<|im_sep|>CONTENT<|im_end|>   (Phi-4)
//   olmo2:   <|ROLE|>\nCONTENT\n for system and user, <|assistant|>\nCONTENT<|endoftext|>\n (OLMo 2
//            Instruct's, which is Tulu 3's; the last turn without its newline). The role markers are
//            plain text to its tokenizer; the BOS it opens with is the document start token.
//   gemma:   <start_of_turn>ROLE\nCONTENT<end_of_turn>\n, the assistant's role "model" (Gemma 2 and 3
//            instruction-tuned); content trimmed; a system message goes before the first user message's
//            content with a blank line after it; the turns must alternate user, assistant, user, ...
//   llama2:  [INST] USER [/INST] ASSISTANT </s> (Llama 2 chat), each user turn but the first after <s>
//            (the first after the document's), content trimmed, a system message opening the first
//            user turn as <<SYS>>\nSYSTEM\n<</SYS>>\n\n; the turns alternate as gemma's do.
//   mistral: " [INST] USER [/INST] ASSISTANT</s>" (Mistral-7B-Instruct v0.1 and v0.2, their templates since
//            2024), content as given, a system message opening the first user turn with a blank line
//            after it; the turns alternate.
//   cohere:  <|START_OF_TURN_TOKEN|>ROLE_TOKENCONTENT<|END_OF_TURN_TOKEN|>, ROLE_TOKEN <|SYSTEM_TOKEN|>, <|USER_TOKEN|>
//            or <|CHATBOT_TOKEN|> (Command-R's and Aya's); user and assistant content stripped, the system
//            message as given; after one system message the turns alternate user, assistant, ...
//   mistral-v3: "[INST] USER[/INST] ASSISTANT</s>" (Mistral's v3 tokenizer: Mistral-7B-Instruct v0.3,
//            Mixtral-8x22B-Instruct, Mistral-Large-Instruct-2407, Codestral; [INST] and [/INST] are
//            its special tokens), the reply trimmed, a system message and a blank line opening the
//            *last* user turn (mistral-common's placement, and its Hub template's revision comparing
//            with user_messages[-1]); the turns alternate.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

class Tokenizer;

inline constexpr const char* kChatTemplateNames =
    "llama3, chatml, qwen2.5, qwen3, phi3, phi4, olmo2, gemma, cohere, llama2, mistral or mistral-v3";

// A piece of a document's text, and whether its tokens are training targets.
struct DocumentPiece {
  std::string text;
  bool trained = true;
};

struct ChatMessage {
  std::string role;  // system, user, assistant, tool, ...: only an assistant's content trains
  std::string content;
  std::string reasoning = {};  // an assistant's "reasoning_content" (qwen3's think block), or empty
};

class ChatTemplate {
 public:
  // One of kChatTemplateNames; anything else throws naming --chat-template.
  static ChatTemplate named(std::string_view name);

  const std::string& name() const { return name_; }
  // The conversation's pieces, in order. Throws for a conversation the template cannot render (gemma's
  // turns out of order).
  std::vector<DocumentPiece> render(const std::vector<ChatMessage>& messages) const;
  // What opens the assistant's turn, after which a model writes its reply (Hugging Face's
  // add_generation_prompt); without `thinking`, qwen3's empty think block after it (Qwen3's
  // enable_thinking=False). And the special token that ends a turn.
  std::string generation_prompt(bool thinking = true) const;
  bool thinks() const { return thinks_; }  // whether the template has think blocks (qwen3)
  std::string_view end_of_turn() const { return end_of_turn_; }
  // Every special token a generated reply may end at, end_of_turn() first: also the end of text a
  // model may write instead, and for llama3 Llama 3.1's <|eom_id|> (a message that calls a tool), as
  // Hugging Face's generation configs list them under eos_token_id. A vocabulary may lack some.
  std::vector<std::string_view> reply_ends() const;
  // Whether the model's own template names `role` (system, user, assistant, tool; llama3 also
  // ipython): any other role is rendered as given, a header the model never saw in its training.
  bool knows_role(std::string_view role) const;
  // The roles knows_role() accepts, for messages: "system, user, assistant, tool".
  std::string known_roles() const;
  // The template as Jinja for a Hugging Face export's tokenizer_config.json: what transformers'
  // apply_chat_template renders from it is `start_text` (the document start token's text) and the pieces
  // render() gives, and add_generation_prompt adds generation_prompt() (Qwen3's enable_thinking=false
  // its empty think block).
  std::string jinja(std::string_view start_text) const;
  // Throws naming the template and the fix unless `tokenizer` holds every special token it uses.
  void require_tokens_of(const Tokenizer& tokenizer) const;

 private:
  std::string name_;
  std::string_view before_role_, after_role_, end_of_turn_, after_turn_;  // string literals
  // What ends a turn other than an assistant's, when not end_of_turn_ (then no after_turn_ follows it).
  std::string_view other_turn_end_;
  bool last_turn_bare_ = false;  // no after_turn_ after the conversation's last turn (olmo2)
  bool knows_tool_ = true;       // the template has a tool role
  std::string_view default_system_;  // put first when a conversation has no system message
  bool trims_content_ = false;        // strip whitespace off each message's ends
  // What a header names each role: the assistant "model" (gemma); Cohere's a token each.
  std::string_view assistant_role_ = "assistant", user_role_ = "user", system_role_ = "system";
  std::string_view role_text(std::string_view role) const;
  bool folds_system_ = false;  // the system message opens the first user turn's content, turns alternate (gemma)
  bool alternates_ = false;    // after one system message, a turn of its own, user and assistant alternate (cohere)
  bool system_as_given_ = false;  // the system message is not trimmed when the rest is (cohere)
  // Llama 2's and Mistral's [INST] turns, in place of headers: what opens the first user turn and the
  // others, closes them, goes around a system message folded into a user turn (the first, or with
  // system_on_last_query the last), and ends a reply (trimmed with trims_reply).
  struct InstTurns {
    std::string_view first_open, open, close, system_before, system_after, reply_end;
    bool system_on_last_query = false, trims_reply = false;
  };
  std::optional<InstTurns> inst_;
  std::vector<DocumentPiece> render_inst(const std::vector<ChatMessage>& messages) const;
  bool groups_tool_results_ = false;  // tool messages as <tool_response>s in user turns (Qwen)
  bool thinks_ = false;               // think blocks on the assistant turns after the last query (Qwen3)
  // An assistant message as Qwen3's template reads it: its reasoning_content, or what its content
  // holds before </think> (after <think>), the content then being what follows the last </think>,
  // without leading newlines. Views into `m`; render() strips the reasoning's newlines.
  struct Reply {
    std::string_view reasoning, content;
  };
  static Reply reply_of(const ChatMessage& m);
  std::vector<std::string_view> specials_;  // the special tokens the rendering uses
};

}  // namespace tessera
