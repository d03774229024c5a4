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

# Qwen3 thinking-2507: "<think>\n" is in the generation prompt, so it is context.
case("qwen3-thinking-2507", PC, im("user", "Translate to French: cat") +
     "<|im_start|>assistant\n<think>\n⟦\n</think>\n\nchat<|im_end|>⟧\n")
case("qwen3-thinking-2507", {"prompt": "q", "completion": "<think>r</think>a"},
     im("user", "q") + "<|im_start|>assistant\n<think>\n⟦r\n</think>\n\na<|im_end|>⟧\n")

# ---- the other layouts: alpaca and ShareGPT ----
ALPACA = {"instruction": "Translate to French", "input": "cat", "output": "chat", "system": "You are terse."}
ALPACA_NO_INPUT = {"instruction": "Say hi", "input": "", "output": "hi"}
case("llama3.1", ALPACA, "<|begin_of_text|>" + L3H("system") + DATE + "You are terse.<|eot_id|>" + L3H("user") +
     "Translate to French\ncat<|eot_id|>" + L3H("assistant") + "⟦chat<|eot_id|>⟧")
case("qwen2.5", ALPACA_NO_INPUT, im("system", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.") +
     im("user", "Say hi") + im_a("hi"))
SHAREGPT = {"conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello! How can I help?"},
                              {"from": "human", "value": "What is 2+2?"}, {"from": "gpt", "value": "4"}],
            "system": "You are terse."}
case("qwen2.5", SHAREGPT, chatml_sys + im_a("4"))
case("mistral-v0.2", {"conversations": SHAREGPT["conversations"]},
     "<s> [INST] Hi there [/INST]⟦ Hello! How can I help?</s>⟧ [INST] What is 2+2? [/INST]⟦ 4</s>⟧")

# ---- tools: OpenAI messages with tools, tool_calls and tool results; ShareGPT's function_call ----
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "e.g. Paris"},
                                                           "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}},
                          "required": ["city"]}}}
# tojson's corners: floats as Python writes them, non-ASCII kept, quotes, backslashes and control characters escaped
ODD = {"type": "function", "function": {"name": "odd", "description": "café \"quoted\" back\\slash \u0001 tab\t",
       "parameters": {"type": "object", "properties": {"x": {"type": "number", "default": 1e-05},
                                                       "y": {"type": "number", "default": 1500.0},
                                                       "z": {"type": "number", "default": 0.1},
                                                       "w": {"type": "integer", "default": 3},
                                                       "e": {"type": "object", "properties": {}}, "l": []}}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CALL_STR = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
RESULT = "{\"temp\": 21.5}"
def tool_conv(call=CALL, content="", system=None):
    conv = [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": content, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
            {"role": "assistant", "content": "It is 21.5 degrees."}]
    return ([{"role": "system", "content": system}] if system else []) + conv
def with_tools(conv, tools=(WEATHER,)):
    return {"messages": conv, "tools": list(tools)}

L31_TOOLS = ("Given the following functions, please respond with a JSON for a function call with its proper arguments that "
             "best answers the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": dictionary "
             "of argument name and its value}.Do not use variables.\n\n")
def l31_tools(tools, system="", first="What is the weather in Paris?"):
    return ("<|begin_of_text|>" + L3H("system") + "Environment: ipython\n" + DATE + system + "<|eot_id|>" + L3H("user") +
            L31_TOOLS + "".join(json.dumps(t, indent=4, ensure_ascii=False) + "\n\n" for t in tools) + first + "<|eot_id|>")
l31_rest = (L3H("assistant") + "⟦{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>⟧" +
            L3H("ipython") + json.dumps(RESULT) + "<|eot_id|>" + L3H("assistant") + "⟦It is 21.5 degrees.<|eot_id|>⟧")
for t in ("llama3.1", "llama3.2"):
    case(t, with_tools(tool_conv()), l31_tools([WEATHER]) + l31_rest)
case("llama3.1", with_tools(tool_conv(content=None, system="You are terse."), (WEATHER, ODD)),
     l31_tools([WEATHER, ODD], "You are terse.") + l31_rest)
# arguments given as JSON text: the template's tojson writes a string
case("llama3.1", with_tools(tool_conv(CALL_STR)), l31_tools([WEATHER]) + L3H("assistant") +
     "⟦{\"name\": \"get_weather\", \"parameters\": " + json.dumps(CALL_STR["function"]["arguments"]) + "}<|eot_id|>⟧" +
     L3H("ipython") + json.dumps(RESULT) + "<|eot_id|>" + L3H("assistant") + "⟦It is 21.5 degrees.<|eot_id|>⟧")
# tool calls without tools: no tool section, the calls as they are
case("llama3.1", tool_conv(), "<|begin_of_text|>" + L3H("system") + DATE + "<|eot_id|>" + L3H("user") +
     "What is the weather in Paris?<|eot_id|>" + l31_rest)

QWEN_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
             "<args-json-object>}\n</tool_call><|im_end|>\n")
QWEN_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
             "function signatures within <tools></tools> XML tags:\n<tools>")
def qwen_tools(system, tools):
    return ("<|im_start|>system\n" + system + QWEN_HEAD + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools) +
            QWEN_TAIL)
def qcall(args): return "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>"
ARGS = "{\"city\": \"Paris\"}"
q_result = "<|im_start|>user\n<tool_response>\n" + RESULT + "\n</tool_response><|im_end|>\n"
Q25_SYS = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n"
case("qwen2.5", with_tools(tool_conv()), qwen_tools(Q25_SYS, [WEATHER]) + im("user", "What is the weather in Paris?") +
     "<|im_start|>assistant\n⟦" + qcall(ARGS) + "<|im_end|>⟧\n" + q_result + im_a("It is 21.5 degrees."))
case("qwen2.5", with_tools(tool_conv(CALL_STR, content=None, system="You are terse."), (WEATHER, ODD)),
     qwen_tools("You are terse.\n\n", [WEATHER, ODD]) + im("user", "What is the weather in Paris?") +
     "<|im_start|>assistant\n⟦" + qcall(json.dumps(ARGS)) + "<|im_end|>⟧\n" + q_result + im_a("It is 21.5 degrees."))
# two calls in one turn after some text, their two results in one user turn; calls without tools
TWO = [{"role": "user", "content": "Weather in Paris and Rome?"},
       {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL, {"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
       {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "rain"},
       {"role": "assistant", "content": "Paris is sunny, Rome rainy."}]
two_results = "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrain\n</tool_response><|im_end|>\n"
case("qwen2.5", TWO, im("system", Q25_SYS.strip()) + im("user", "Weather in Paris and Rome?") +
     "<|im_start|>assistant\n⟦Let me check.\n" + qcall(ARGS) + "\n" + qcall("{\"city\": \"Rome\"}") + "<|im_end|>⟧\n" +
     two_results + im_a("Paris is sunny, Rome rainy."))
for t in ("qwen3", "qwen3-thinking-2507"):
    think_prompt = t == "qwen3-thinking-2507"
    last = ("<|im_start|>assistant\n<think>\n⟦\n</think>\n\nIt is 21.5 degrees.<|im_end|>⟧\n" if think_prompt
            else im_a("<think>\n\n</think>\n\nIt is 21.5 degrees."))
    case(t, with_tools(tool_conv()), qwen_tools("", [WEATHER]) + im("user", "What is the weather in Paris?") +
         "<|im_start|>assistant\n⟦" + qcall(ARGS) + "<|im_end|>⟧\n" + q_result + last)
case("qwen3", with_tools(tool_conv(CALL_STR, system="You are terse."), (WEATHER, ODD)),
     qwen_tools("You are terse.\n\n", [WEATHER, ODD]) + im("user", "What is the weather in Paris?") +
     "<|im_start|>assistant\n⟦" + qcall(ARGS) + "<|im_end|>⟧\n" + q_result +
     im_a("<think>\n\n</think>\n\nIt is 21.5 degrees."))
case("qwen3", TWO, im("user", "Weather in Paris and Rome?") +
     "<|im_start|>assistant\n⟦Let me check.\n" + qcall(ARGS) + "\n" + qcall("{\"city\": \"Rome\"}") + "<|im_end|>⟧\n" +
     two_results + im_a("<think>\n\n</think>\n\nParis is sunny, Rome rainy."))
# ShareGPT with function_call and observation, tools as JSON text
SHAREGPT_TOOLS = {"conversations": [{"from": "human", "value": "What is the weather in Paris?"},
                                    {"from": "function_call", "value": json.dumps(CALL["function"])},
                                    {"from": "observation", "value": RESULT},
                                    {"from": "gpt", "value": "It is 21.5 degrees."}],
                  "tools": json.dumps([WEATHER])}
case("qwen2.5", SHAREGPT_TOOLS, qwen_tools(Q25_SYS, [WEATHER]) + im("user", "What is the weather in Paris?") +
     "<|im_start|>assistant\n⟦" + qcall(ARGS) + "<|im_end|>⟧\n" + q_result + im_a("It is 21.5 degrees."))
case("llama3.1", SHAREGPT_TOOLS, l31_tools([WEATHER]) + l31_rest)

# ---- gpt-oss (harmony): the answer is what follows the generation prompt <|start|>assistant; the
# analysis (thinking) shows for the last answer and for a call no later final answer follows ----
def h_sys(tools=False):
    return ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
            "2024-06\nCurrent date: 2024-07-26\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. "
            "Channel must be included for every message." +
            ("\nCalls to these tools must go to the commentary channel: 'functions'." if tools else "") + "<|end|>")
def h_dev(instructions=None, tools=None):
    return ("<|start|>developer<|message|>" + ("# Instructions\n\n" + instructions + "\n\n" if instructions else "") +
            ("# Tools\n\n## functions\n\nnamespace functions {\n\n" + tools + "} // namespace functions" if tools else "") +
            "<|end|>")
def h_user(text): return "<|start|>user<|message|>" + text + "<|end|>"
def h_final(text, last=True, thinking=None):
    return ("<|start|>assistant⟦" + ("<|channel|>analysis<|message|>" + thinking + "<|end|><|start|>assistant" if thinking else "") +
            "<|channel|>final<|message|>" + text + ("<|return|>" if last else "<|end|>") + "⟧")
def h_call(name, args, analysis=None):
    return ("<|start|>assistant⟦" + ("<|channel|>analysis<|message|>" + analysis + "<|end|><|start|>assistant" if analysis else "") +
            " to=functions." + name + "<|channel|>commentary json<|message|>" + args + "<|call|>⟧")
def h_result(name, text): return "<|start|>functions." + name + " to=assistant<|channel|>commentary<|message|>" + text + "<|end|>"
NOW = {"type": "function", "function": {"name": "now", "description": "The time."}}
NOW_TS = "// The time.\ntype now = () => any;\n\n"
WEATHER_TS = ("// Get the weather in a city\ntype get_weather = (_: {\n// e.g. Paris\ncity: string,\n"
              "unit?: \"c\" | \"f\", // default: c,\n}) => any;\n\n")
def now_call(content="", thinking=None):
    m = {"role": "assistant", "content": content, "tool_calls": [{"type": "function", "function": {"name": "now", "arguments": {}}}]}
    return {**m, "thinking": thinking} if thinking else m
case("gpt-oss", [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
                 {"role": "assistant", "content": "4", "thinking": "Add 2 and 2."}],
     h_sys() + h_dev("Be brief.") + h_user("What is 2+2?") + h_final("4", thinking="Add 2 and 2."))
case("gpt-oss", [S, {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1", "thinking": "t1"},
                 {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2", "thinking": "t2"}],
     h_sys() + h_dev("You are terse.") + h_user("q1") + h_final("a1", last=False) + h_user("q2") +
     h_final("a2", thinking="t2"))
case("gpt-oss", PC, h_sys() + h_user("Translate to French: cat") + h_final("chat"))
case("gpt-oss", WS_CONV, h_sys() + h_user("  Tell me a joke  ") + h_final("\nWhy did the chicken cross the road? \n"))
# a call, its result, then the final answer: the call's thinking is dropped
case("gpt-oss", with_tools([{"role": "user", "content": "Time?"}, now_call(thinking="Call now."),
                            {"role": "tool", "content": "12:00"},
                            {"role": "assistant", "content": "It is noon.", "thinking": "It said 12:00."}], (NOW,)),
     h_sys(True) + h_dev(tools=NOW_TS) + h_user("Time?") + h_call("now", "{}") + h_result("now", "\"12:00\"") +
     h_final("It is noon.", thinking="It said 12:00."))
# the conversation ends with the result: the call's thinking (or its content) shows
case("gpt-oss", with_tools([{"role": "user", "content": "Time?"}, now_call(thinking="Call now."),
                            {"role": "tool", "content": "12:00"}], (NOW,)),
     h_sys(True) + h_dev(tools=NOW_TS) + h_user("Time?") + h_call("now", "{}", "Call now.") + h_result("now", "\"12:00\""))
case("gpt-oss", with_tools(tool_conv(content="Checking.", system="You are terse.")[:4], (WEATHER, NOW)),
     h_sys(True) + h_dev("You are terse.", WEATHER_TS + NOW_TS) + h_user("What is the weather in Paris?") +
     h_call("get_weather", ARGS, "Checking.") + h_result("get_weather", json.dumps(RESULT)))
case("gpt-oss", with_tools(tool_conv(CALL_STR), (WEATHER,)),
     h_sys(True) + h_dev(tools=WEATHER_TS) + h_user("What is the weather in Paris?") +
     h_call("get_weather", json.dumps(ARGS)) + h_result("get_weather", json.dumps(RESULT)) + h_final("It is 21.5 degrees."))
case("gpt-oss", SHAREGPT_TOOLS, h_sys(True) + h_dev(tools=WEATHER_TS) + h_user("What is the weather in Paris?") +
     h_call("get_weather", ARGS) + h_result("get_weather", json.dumps(RESULT)) + h_final("It is 21.5 degrees."))
json.dump(cases, open(sys.argv[1], "w"), indent=1, ensure_ascii=False)
print(len(cases), "cases")
