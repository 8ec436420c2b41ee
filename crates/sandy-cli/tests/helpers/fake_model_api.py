#!/usr/bin/python3
"""Test-only stand-in for a model provider's HTTP API, for the agent tests. Runs on the
host, outside Sandy, as the test user, on a free 127.0.0.1 port; never runs longer than
five minutes.

    fake_model_api.py DIR SCRIPT

SCRIPT is a JSON file: {"steps": [{"tool": NAME, "input": {...}}, ...], "final": TEXT}.
The agent's main loop is answered one step per turn: turn N (N tool results already in
the conversation) gets a call of steps[N]; once every step has a result, it gets the
final text. Requests that offer no tools (titles, summaries, quota probes) get a short
text answer and do not advance the script.

APIs:

    POST /v1/messages                 Anthropic Messages, streaming (SSE) or not
    POST /v1/messages/count_tokens    {"input_tokens": ...}
    POST /v1/responses                OpenAI Responses, streaming (SSE) or not
    POST /v1/chat/completions         OpenAI-compatible Chat Completions (OpenCode's custom
                                      providers), streaming (SSE) or not
    POST /v1beta/models/M:streamGenerateContent (SSE), :generateContent, :countTokens
                                      Gemini API (function calls get ids
                                      toolu_sandy_step_NN; a function response without
                                      such an id is taken as the result of its turn)
    GET  /v1/models                   a plausible model list
    anything else                     404 with a JSON error

Writes, in DIR: requests.jsonl (one line per request: method, path, a few headers,
whether it was a main-loop turn, the step answered), first_request.json (the first request
that offered tools, whole, for diagnosis), results.json (every tool result
received, by call id, in the order first seen) and errors.log (requests that did not fit
the protocol). Prints {"port": PORT} once it listens.
"""

import http.server
import json
import os
import signal
import sys
import threading
import uuid

LOCK = threading.Lock()
STATE = {"dir": None, "script": None, "results": {}, "order": []}


def append(name, line):
    with LOCK:
        with open(os.path.join(STATE["dir"], name), "a") as f:
            f.write(line + "\n")


def record_results(found):
    """Adds newly seen tool results (call id -> text) and rewrites results.json."""
    with LOCK:
        changed = False
        for call_id, text in found:
            if call_id not in STATE["results"]:
                STATE["results"][call_id] = text
                STATE["order"].append(call_id)
                changed = True
        if changed:
            path = os.path.join(STATE["dir"], "results.json")
            with open(path + ".tmp", "w") as f:
                json.dump(
                    [{"id": i, "content": STATE["results"][i]} for i in STATE["order"]],
                    f,
                )
            os.replace(path + ".tmp", path)


def text_of(content):
    """Flattens a tool result's content (a string or a list of blocks) to text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if "text" in block:
                    parts.append(str(block["text"]))
                else:
                    parts.append(json.dumps(block))
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return json.dumps(content)


def call_id(n):
    return "toolu_sandy_step_%02d" % n


def next_step(done):
    """What the main loop gets after `done` tool results: ("tool", step) or ("final", text)."""
    steps = STATE["script"]["steps"]
    if done < len(steps):
        return ("tool", steps[done])
    return ("final", STATE["script"]["final"])


# --- Anthropic Messages ------------------------------------------------------------------


def anthropic_results(body):
    found = []
    for message in body.get("messages", []):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                text = text_of(block.get("content", ""))
                if block.get("is_error"):
                    text = "[is_error] " + text
                found.append((block.get("tool_use_id", "?"), text))
    return found


def anthropic_reply(body):
    """Returns (content blocks, stop reason, step index or None, main-loop flag)."""
    tools = [t.get("name") for t in body.get("tools", []) if isinstance(t, dict)]
    found = anthropic_results(body)
    record_results(found)
    if not tools:
        return ([{"type": "text", "text": "Sandy test."}], "end_turn", None, False)
    done = len([i for i, _ in found if i.startswith("toolu_sandy_step_")])
    kind, what = next_step(done)
    if kind == "final":
        return ([{"type": "text", "text": what}], "end_turn", done, True)
    if what["tool"] not in tools:
        append("errors.log", "tool %s not offered; offered: %s" % (what["tool"], tools))
    block = {"type": "tool_use", "id": call_id(done), "name": what["tool"], "input": what["input"]}
    return ([block], "tool_use", done, True)


def anthropic_message(body, content, stop):
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-sandy-test"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 100,
            "output_tokens": 20,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def sse(event, data):
    return ("event: %s\ndata: %s\n\n" % (event, json.dumps(data))).encode()


def anthropic_stream(body, content, stop):
    start = anthropic_message(body, [], None)
    start["usage"]["output_tokens"] = 1
    out = [sse("message_start", {"type": "message_start", "message": start})]
    out.append(sse("ping", {"type": "ping"}))
    for index, block in enumerate(content):
        if block["type"] == "text":
            empty = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            empty = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": empty},
            )
        )
        out.append(
            sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        )
        out.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
        )
    )
    out.append(sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


# --- OpenAI Responses ----------------------------------------------------------------------


def responses_results(body):
    found = []
    items = body.get("input", [])
    if not isinstance(items, list):
        return found
    for item in items:
        if isinstance(item, dict) and item.get("type") in (
            "function_call_output",
            "custom_tool_call_output",
        ):
            found.append((item.get("call_id", "?"), text_of(item.get("output", ""))))
    return found


def responses_reply(body):
    """Returns (output items, step index or None, main-loop flag)."""
    tools = []
    for t in body.get("tools", []) or []:
        if isinstance(t, dict):
            tools.append(t.get("name") or t.get("type"))
    found = responses_results(body)
    record_results(found)
    message_id = "msg_" + uuid.uuid4().hex[:24]

    def message(text):
        return {
            "type": "message",
            "id": message_id,
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    if not tools:
        return ([message("Sandy test.")], None, False)
    done = len([i for i, _ in found if i.startswith("toolu_sandy_step_")])
    kind, what = next_step(done)
    if kind == "final":
        return ([message(what)], done, True)
    if what["tool"] not in tools:
        append("errors.log", "tool %s not offered; offered: %s" % (what["tool"], tools))
    item = {
        "type": "function_call",
        "id": "fc_" + uuid.uuid4().hex[:24],
        "status": "completed",
        "call_id": call_id(done),
        "name": what["tool"],
        "arguments": json.dumps(what["input"]),
    }
    return ([item], done, True)


def responses_object(body, output, status):
    return {
        "id": "resp_" + uuid.uuid4().hex[:24],
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": body.get("model", "gpt-sandy-test"),
        "output": output,
        "usage": {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 120,
        },
    }


def responses_stream(body, output):
    def ev(kind, data):
        data = dict(data)
        data["type"] = kind
        return ("event: %s\ndata: %s\n\n" % (kind, json.dumps(data))).encode()

    created = responses_object(body, [], "in_progress")
    out = [ev("response.created", {"response": created})]
    for index, item in enumerate(output):
        out.append(ev("response.output_item.added", {"output_index": index, "item": item}))
        if item["type"] == "message":
            text = item["content"][0]["text"]
            out.append(
                ev(
                    "response.output_text.delta",
                    {"output_index": index, "content_index": 0, "item_id": item["id"], "delta": text},
                )
            )
        out.append(ev("response.output_item.done", {"output_index": index, "item": item}))
    done = responses_object(body, output, "completed")
    done["id"] = created["id"]
    out.append(ev("response.completed", {"response": done}))
    return b"".join(out)


# --- OpenAI-compatible Chat Completions -------------------------------------------------------


def chat_results(body):
    found = []
    for message in body.get("messages", []) or []:
        if isinstance(message, dict) and message.get("role") == "tool":
            found.append((message.get("tool_call_id", "?"), text_of(message.get("content", ""))))
    return found


def chat_reply(body):
    """Returns (assistant message, finish reason, step index or None, main-loop flag)."""
    tools = []
    for t in body.get("tools", []) or []:
        if isinstance(t, dict):
            tools.append((t.get("function") or {}).get("name"))
    found = chat_results(body)
    record_results(found)
    if not tools:
        return ({"role": "assistant", "content": "Sandy test."}, "stop", None, False)
    done = len([i for i, _ in found if i.startswith("toolu_sandy_step_")])
    kind, what = next_step(done)
    if kind == "final":
        return ({"role": "assistant", "content": what}, "stop", done, True)
    if what["tool"] not in tools:
        append("errors.log", "tool %s not offered; offered: %s" % (what["tool"], tools))
    call = {
        "id": call_id(done),
        "type": "function",
        "function": {"name": what["tool"], "arguments": json.dumps(what["input"])},
    }
    return ({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", done, True)


def chat_object(body, message, finish):
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:24],
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "sandy-test"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def chat_stream(body, message, finish):
    ident = "chatcmpl-" + uuid.uuid4().hex[:24]

    def chunk(delta, finish_reason=None, usage=None):
        data = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body.get("model", "sandy-test"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        if usage is not None:
            data["usage"] = usage
        return ("data: %s\n\n" % json.dumps(data)).encode()

    out = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        out.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        delta = dict(call)
        delta["index"] = index
        out.append(chunk({"tool_calls": [delta]}))
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    out.append(chunk({}, finish, usage))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


# --- Gemini API ------------------------------------------------------------------------------


def gemini_results(body):
    """Function responses in the conversation; one without a scripted id is the result of
    the turn it answers (the Nth function call in the conversation is step N)."""
    found = []
    calls = 0
    for message in body.get("contents", []) or []:
        if not isinstance(message, dict):
            continue
        for part in message.get("parts", []) or []:
            if not isinstance(part, dict):
                continue
            if "functionCall" in part:
                calls += 1
            response = part.get("functionResponse")
            if isinstance(response, dict):
                ident = response.get("id") or ""
                if not ident.startswith("toolu_sandy_step_"):
                    ident = call_id(calls - 1) if calls else "?"
                found.append((ident, text_of_gemini(response.get("response"))))
    return found


def text_of_gemini(response):
    if isinstance(response, dict):
        parts = []
        for key in ("output", "error", "llmContent"):
            if key in response:
                parts.append(text_of(response[key]))
        return "\n".join(parts) if parts else json.dumps(response)
    return text_of(response)


def gemini_reply(body):
    """Returns (parts, step index or None, main-loop flag)."""
    tools = []
    for t in body.get("tools", []) or []:
        if isinstance(t, dict):
            for d in t.get("functionDeclarations", []) or []:
                if isinstance(d, dict):
                    tools.append(d.get("name"))
    found = gemini_results(body)
    record_results(found)
    if not tools:
        config = body.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json":
            # Gemini CLI's side requests that want JSON: the next-speaker check and the
            # model router's classifier.
            answer = {
                "reasoning": "Sandy test.",
                "next_speaker": "user",
                "complexity_reasoning": "Sandy test.",
                "complexity_score": 1,
            }
            return ([{"text": json.dumps(answer)}], None, False)
        return ([{"text": "Sandy test."}], None, False)
    done = len([i for i, _ in found if i.startswith("toolu_sandy_step_")])
    kind, what = next_step(done)
    if kind == "final":
        return ([{"text": what}], done, True)
    if what["tool"] not in tools:
        append("errors.log", "tool %s not offered; offered: %s" % (what["tool"], tools))
    call = {"functionCall": {"id": call_id(done), "name": what["tool"], "args": what["input"]}}
    return ([call], done, True)


def gemini_response(body, parts):
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
        "modelVersion": "gemini-sandy-test",
        "responseId": "resp_" + uuid.uuid4().hex[:24],
    }


def gemini_stream(body, parts):
    return ("data: %s\r\n\r\n" % json.dumps(gemini_response(body, parts))).encode()


# --- HTTP ------------------------------------------------------------------------------------


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            append("errors.log", "%s %s: body is not JSON" % (self.command, self.path))
            return {}

    def send(self, code, payload, content_type="application/json"):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        self.send_header("x-request-id", "req_" + uuid.uuid4().hex[:24])
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def log_request_line(self, extra):
        entry = {
            "method": self.command,
            "path": self.path,
            "user_agent": self.headers.get("user-agent", ""),
        }
        entry.update(extra)
        append("requests.jsonl", json.dumps(entry))

    def not_found(self):
        self.log_request_line({"answer": 404})
        self.send(
            404,
            {"type": "error", "error": {"type": "not_found_error", "message": "not here"}},
        )

    def do_GET(self):
        path = self.path.split("?")[0]
        if path.endswith("/models"):
            self.log_request_line({"answer": "models"})
            models = [{"id": "claude-sandy-test", "type": "model", "display_name": "Sandy test"}]
            self.send(200, {"data": models, "object": "list", "has_more": False})
            return
        self.not_found()

    def do_HEAD(self):
        self.log_request_line({"answer": 200})
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        path = self.path.split("?")[0]
        body = self.body()
        first = os.path.join(STATE["dir"], "first_request.json")
        if body.get("tools") and not os.path.exists(first):
            with open(first, "w") as f:
                json.dump(body, f, indent=1)
        if path.endswith("/messages/count_tokens"):
            self.log_request_line({"answer": "count_tokens"})
            self.send(200, {"input_tokens": 100})
            return
        if path.endswith("/messages"):
            content, stop, step, main = anthropic_reply(body)
            stream = bool(body.get("stream"))
            self.log_request_line(
                {"answer": "messages", "main": main, "step": step, "stream": stream, "model": body.get("model")}
            )
            if stream:
                self.send(200, anthropic_stream(body, content, stop), "text/event-stream")
            else:
                self.send(200, anthropic_message(body, content, stop))
            return
        if path.endswith("/chat/completions"):
            message, finish, step, main = chat_reply(body)
            stream = bool(body.get("stream"))
            self.log_request_line(
                {"answer": "chat", "main": main, "step": step, "stream": stream, "model": body.get("model")}
            )
            if stream:
                self.send(200, chat_stream(body, message, finish), "text/event-stream")
            else:
                self.send(200, chat_object(body, message, finish))
            return
        if path.endswith("/responses"):
            output, step, main = responses_reply(body)
            stream = bool(body.get("stream"))
            self.log_request_line(
                {"answer": "responses", "main": main, "step": step, "stream": stream, "model": body.get("model")}
            )
            if stream:
                self.send(200, responses_stream(body, output), "text/event-stream")
            else:
                self.send(200, responses_object(body, output, "completed"))
            return
        if ":" in path.rsplit("/", 1)[-1] and "/models/" in path:
            model, method = path.rsplit("/", 1)[-1].split(":", 1)
            if method == "countTokens":
                self.log_request_line({"answer": "countTokens"})
                self.send(200, {"totalTokens": 100})
                return
            if method in ("generateContent", "streamGenerateContent"):
                parts, step, main = gemini_reply(body)
                stream = method == "streamGenerateContent"
                self.log_request_line(
                    {"answer": method, "main": main, "step": step, "stream": stream, "model": model}
                )
                if stream:
                    self.send(200, gemini_stream(body, parts), "text/event-stream")
                else:
                    self.send(200, gemini_response(body, parts))
                return
        self.not_found()


def main():
    signal.alarm(300)
    STATE["dir"] = sys.argv[1]
    with open(sys.argv[2]) as f:
        STATE["script"] = json.load(f)
    # The egress tests run it on a public-looking address inside their own network
    # namespace, reached by name through Sandy's proxy.
    bind = os.environ.get("FAKE_MODEL_API_BIND", "127.0.0.1")
    server = http.server.ThreadingHTTPServer((bind, 0), Handler)
    server.daemon_threads = True
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
