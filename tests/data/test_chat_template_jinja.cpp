// The chat templates' Jinja (ChatTemplate::jinja, written into an export's tokenizer_config.json)
// rendered by Hugging Face's Jinja engine (npm @huggingface/jinja, fetched into <build>/test-cache/npm;
// without node or npm these tests skip) gives the text Tessera trains on: the start token's text and
// the pieces render() gives, with and without a system message, ending on either role, with tool results
// and Qwen3's think blocks, and the generation prompt after it (with thinking off, Qwen3's empty block).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/tokenizer_references.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// Each case's text by the engine: `cases` as render_chat_template.js reads them.
std::vector<std::string> render_with_jinja(const fs::path& package, const nlohmann::json& cases) {
  const fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "cases.json", cases.dump());
  std::string line = "node";
  testing::append_word(line, testing::kTokenizerScripts / "render_chat_template.js");
  testing::append_word(line, package);
  testing::append_word(line, dir / "cases.json");
  testing::append_word(line, dir / "out.json");
  const testing::CommandResult result = testing::run_command(line);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  if (result.exit_code != 0) return std::vector<std::string>(cases.size());
  return nlohmann::json::parse(testing::read_text(dir / "out.json")).get<std::vector<std::string>>();
}

TEST(ChatTemplateJinja, RendersAsTessera) {
  std::string why;
  const fs::path package = testing::npm_package("@huggingface/jinja@0.5.11", "huggingface-jinja",
                                                "package/package.json package/dist/index.cjs", why);
  if (package.empty()) GTEST_SKIP() << why;
  const std::vector<std::vector<ChatMessage>> conversations = {
      {{"user", "Hi"}, {"assistant", "Hello."}},
      {{"system", "Be brief.\n"}, {"user", "  What's 2+2? \n"}, {"assistant", " 4\n"}, {"user", "And 3+3?"},
       {"assistant", "6"}},
      {{"user", "One"}, {"assistant", "Two"}, {"user", "Three, 'quoted' and \\ backslashed"}}};
  // Tool results (chatml's and Qwen2.5's): one alone, then two in a row, ending the conversation.
  const std::vector<ChatMessage> tools = {{"user", "Weather?"}, {"assistant", "<tool_call>w</tool_call>"},
                                          {"tool", "sunny"},      {"assistant", "Sunny."},
                                          {"tool", "a"},          {"tool", "b"}};
  // Qwen3's reasoning: in the content before </think> (dropped before the last query), as
  // reasoning_content, absent from a final reply (an empty block), and after a tool result.
  const std::vector<std::vector<ChatMessage>> thoughts = {
      {{"user", "Q1"}, {"assistant", "<think>\nr1\n</think>\n\nA1"}, {"user", "Q2"}, {"assistant", "A2", "\nr2\n"}},
      {{"user", "Q"}, {"assistant", "A"}},
      {{"user", "Q"}, {"assistant", "<think>r</think>call"}, {"tool", "<tool_response>x</tool_response>"},
       {"assistant", "\n\nDone"}}};
  nlohmann::json cases = nlohmann::json::array();
  std::vector<std::string> expected;
  for (const char* name :
       {"llama3", "chatml", "qwen2.5", "qwen3", "phi3", "phi4", "olmo2", "gemma", "cohere", "llama2", "mistral",
        "mistral-v3"}) {
    const ChatTemplate chat = ChatTemplate::named(name);
    const std::string start = "<s>";
    std::vector<std::vector<ChatMessage>> cases_of = conversations;
    if (chat.knows_role("tool")) cases_of.push_back(tools);
    if (chat.thinks()) cases_of.insert(cases_of.end(), thoughts.begin(), thoughts.end());
    for (const auto& conversation : cases_of) {
      nlohmann::json messages = nlohmann::json::array();
      for (const ChatMessage& m : conversation) {
        messages.push_back({{"role", m.role}, {"content", m.content}});
        if (!m.reasoning.empty()) messages.back()["reasoning_content"] = m.reasoning;
      }
      std::string text = start;
      for (const DocumentPiece& piece : chat.render(conversation)) text += piece.text;
      for (bool prompt : {false, true}) {
        cases.push_back({{"template", chat.jinja(start)}, {"messages", messages}, {"add_generation_prompt", prompt}});
        expected.push_back(prompt ? text + chat.generation_prompt() : text);
      }
      if (chat.thinks()) {
        cases.push_back({{"template", chat.jinja(start)}, {"messages", messages}, {"add_generation_prompt", true},
                         {"enable_thinking", false}});
        expected.push_back(text + chat.generation_prompt(false));
      }
    }
  }
  const std::vector<std::string> rendered = render_with_jinja(package, cases);
  ASSERT_EQ(rendered.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(rendered[i], expected[i]) << cases[i]["template"].get<std::string>();
  std::printf("@huggingface/jinja: %zu renderings compared\n", expected.size());
}

}  // namespace
}  // namespace tessera
