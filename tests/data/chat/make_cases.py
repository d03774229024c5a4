#!/usr/bin/env python3
# Writes tests/data/chat/cases.json: conversations and the text each template renders, the
# trainable parts between ⟦ and ⟧ (derived by hand from the templates).
import json, sys
S = {"role": "system", "content": "You are terse."}
SYS_CONV = [S, {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
WS_CONV = [{"role": "user", "content": "  Tell me a joke  "},
           {"role": "assistant", "content": "\nWhy did the chicken cross the road? \n"}]
PC = {"prompt": "Translate to French: cat", "completion": "chat"}
THINK_CONV = [{"role": "user", "content": "What is 2+2?"},
              {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
              {"role": "user", "content": "And 3+3?"},
              {"role": "assistant", "content": "<think>add again</think>6"}]
REASONING_CONV = [{"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello", "reasoning_content": "\ngreet back\n"}]
ENDS_WITH_USER = SYS_CONV[:4]
L3H = lambda r: "<|start_header_id|>" + r + "<|end_header_id|>\n\n"
DATE = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
cases = []
def case(t, conv, want):
    cases.append({"template": t, "conversation": conv, "expected": want})

l3_sys = ("<|begin_of_text|>" + L3H("system") + "You are terse.<|eot_id|>" + L3H("user") + "Hi there<|eot_id|>" +
          L3H("assistant") + "⟦Hello! How can I help?<|eot_id|>⟧" + L3H("user") + "What is 2+2?<|eot_id|>" +
          L3H("assistant") + "⟦4<|eot_id|>⟧")
case("llama3", SYS_CONV, l3_sys + L3H("assistant"))
case("llama3-gen", SYS_CONV, l3_sys)
case("llama3-gen", WS_CONV, "<|begin_of_text|>" + L3H("user") + "Tell me a joke<|eot_id|>" + L3H("assistant") +
     "⟦Why did the chicken cross the road?<|eot_id|>⟧")
case("llama3-gen", PC, "<|begin_of_text|>" + L3H("user") + "Translate to French: cat<|eot_id|>" + L3H("assistant") +
     "⟦chat<|eot_id|>⟧")
l31_sys = ("<|begin_of_text|>" + L3H("system") + DATE + "You are terse.<|eot_id|>" + L3H("user") + "Hi there<|eot_id|>" +
           L3H("assistant") + "⟦Hello! How can I help?<|eot_id|>⟧" + L3H("user") + "What is 2+2?<|eot_id|>" +
           L3H("assistant") + "⟦4<|eot_id|>⟧")
l31_ws = ("<|begin_of_text|>" + L3H("system") + DATE + "<|eot_id|>" + L3H("user") + "Tell me a joke<|eot_id|>" +
          L3H("assistant") + "⟦Why did the chicken cross the road?<|eot_id|>⟧")
for t in ("llama3.1", "llama3.2"):
    case(t, SYS_CONV, l31_sys)
    case(t, WS_CONV, l31_ws)
case("llama3.1", ENDS_WITH_USER, "<|begin_of_text|>" + L3H("system") + DATE + "You are terse.<|eot_id|>" + L3H("user") +
     "Hi there<|eot_id|>" + L3H("assistant") + "⟦Hello! How can I help?<|eot_id|>⟧" + L3H("user") + "What is 2+2?<|eot_id|>")

def im(role, content): return "<|im_start|>" + role + "\n" + content + "<|im_end|>\n"
def im_a(body): return "<|im_start|>assistant\n⟦" + body + "<|im_end|>⟧\n"
chatml_sys = (im("system", "You are terse.") + im("user", "Hi there") + im_a("Hello! How can I help?") +
              im("user", "What is 2+2?"))
for t, default in (("qwen2", "You are a helpful assistant."),
                   ("qwen2.5", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")):
    case(t, SYS_CONV, chatml_sys + im_a("4"))
    case(t, WS_CONV, im("system", default) + im("user", "  Tell me a joke  ") +
         im_a("\nWhy did the chicken cross the road? \n"))
    case(t, PC, im("system", default) + im("user", "Translate to French: cat") + im_a("chat"))
    case(t, THINK_CONV, im("system", default) + im("user", "What is 2+2?") + im_a("<think>\nadd them\n</think>\n\n4") +
         im("user", "And 3+3?") + im_a("<think>add again</think>6"))
case("qwen3", SYS_CONV, chatml_sys + im_a("<think>\n\n</think>\n\n4"))
case("qwen3", WS_CONV, im("user", "  Tell me a joke  ") +
     im_a("<think>\n\n</think>\n\nWhy did the chicken cross the road? \n"))
case("qwen3", PC, im("user", "Translate to French: cat") + im_a("<think>\n\n</think>\n\nchat"))
case("qwen3", THINK_CONV, im("user", "What is 2+2?") + im_a("4") + im("user", "And 3+3?") +
     im_a("<think>\nadd again\n</think>\n\n6"))
case("qwen3", REASONING_CONV, im("user", "Hi") + im_a("<think>\ngreet back\n</think>\n\nHello"))
case("qwen3", ENDS_WITH_USER, chatml_sys)
# Assistant turns after the last user message: a turn that is not the last shows its reasoning
# only when it has some.
case("qwen3", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>r1</think>a1"},
               {"role": "assistant", "content": "a2"}],
     im("user", "q") + im_a("<think>\nr1\n</think>\n\na1") + im_a("<think>\n\n</think>\n\na2"))
case("qwen3", [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"},
               {"role": "assistant", "content": "a2"}],
     im("user", "q") + im_a("a1") + im_a("<think>\n\n</think>\n\na2"))

case("llama2", SYS_CONV, "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST]⟦ Hello! How can I help? </s>⟧"
     "<s>[INST] What is 2+2? [/INST]⟦ 4 </s>⟧")
case("llama2", WS_CONV, "<s>[INST] Tell me a joke [/INST]⟦ Why did the chicken cross the road? </s>⟧")
case("llama2", PC, "<s>[INST] Translate to French: cat [/INST]⟦ chat </s>⟧")
case("mistral-v0.1", WS_CONV, "<s>[INST]   Tell me a joke   [/INST]⟦\nWhy did the chicken cross the road? \n</s>⟧")
case("mistral-v0.1", PC, "<s>[INST] Translate to French: cat [/INST]⟦chat</s>⟧")
case("mistral-v0.1", SYS_CONV[1:], "<s>[INST] Hi there [/INST]⟦Hello! How can I help?</s>⟧[INST] What is 2+2? [/INST]⟦4</s>⟧")
case("mistral-v0.2", SYS_CONV, "<s> [INST] You are terse.\n\nHi there [/INST]⟦ Hello! How can I help?</s>⟧"
     " [INST] What is 2+2? [/INST]⟦ 4</s>⟧")
case("mistral-v0.2", WS_CONV, "<s> [INST]   Tell me a joke   [/INST]⟦ \nWhy did the chicken cross the road? \n</s>⟧")
case("mistral-v0.3", SYS_CONV, "<s>[INST] Hi there[/INST]⟦ Hello! How can I help?</s>⟧[INST] What is 2+2?[/INST]⟦ 4</s>⟧")
case("mistral-v0.3", ENDS_WITH_USER, "<s>[INST] Hi there[/INST]⟦ Hello! How can I help?</s>⟧"
     "[INST] You are terse.\n\nWhat is 2+2?[/INST]")
case("mistral-v0.3", WS_CONV, "<s>[INST]   Tell me a joke  [/INST]⟦ Why did the chicken cross the road?</s>⟧")
json.dump(cases, open(sys.argv[1], "w"), indent=1, ensure_ascii=False)
print(len(cases), "cases")
