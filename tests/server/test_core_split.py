"""The split between the API server and the engine core: the same greedy tokens in-process
(`LLMEngine.generate`), with the core on a thread and with the core in its own process; the
server process never loads torch; every protocol message survives msgpack; a stop string found
by the server stops the choice in the core too."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import msgspec
import openai
import pytest

from reference_engine.config import EngineConfig
from reference_engine.core.launch import CoreLaunch
from reference_engine.core.messages import (
    AbortRequests,
    AddRequest,
    Command,
    CoreOutputs,
    CoreReady,
    CoreStartFailed,
    CoreStats,
    Handshake,
    Rejection,
    SeqOutput,
    SeqTiming,
    Shutdown,
    StopSequences,
)
from reference_engine.engine import TokenLogprob
from reference_engine.engine_factory import build_engine
from reference_engine.sampling_params import SamplingParams
from reference_engine.server.background import serve_in_background
from tests.support.paths import ROOT

MODEL = "tiny"
CONFIG = EngineConfig(model="tiny-random", num_blocks=256, max_model_len=256, dtype="float32")
PROMPTS = ["The first prompt", "A second, longer prompt about paged attention", "x"]


def greedy_in_process() -> list[str]:
    engine = build_engine(CONFIG).engine
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    return [r.texts[0] for r in engine.generate(PROMPTS, params)]


@pytest.mark.parametrize("engine_core", ["thread", "process"])
def test_greedy_outputs_are_the_same_in_every_mode(engine_core):
    expected = greedy_in_process()
    with serve_in_background(CoreLaunch(CONFIG), MODEL, engine_core=engine_core) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)
        for stream in (False, True):
            texts = []
            for prompt in PROMPTS:
                kwargs = dict(
                    model=MODEL, prompt=prompt, max_tokens=20, temperature=0, extra_body={"ignore_eos": True}
                )
                if stream:
                    texts.append(
                        "".join(c.choices[0].text for c in client.completions.create(**kwargs, stream=True))
                    )
                else:
                    texts.append(client.completions.create(**kwargs).choices[0].text)
            assert texts == expected, (engine_core, stream)


def test_a_stop_string_found_by_the_server_stops_the_choice_in_the_core():
    """The core cannot see text; if the server did not tell it, the choice would run on to its
    200 tokens. It stops a few steps after the stop string instead: as many as the core, which
    does not wait for the server, runs while the server detokenizes and answers (a handful of
    tiny-model steps on a loaded 2-core machine; one or two on an idle one). It is a stop, not
    the abort a finished handler would send."""
    with serve_in_background(CoreLaunch(CONFIG), MODEL) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)
        kwargs = dict(
            model=MODEL, prompt="Find a stop", max_tokens=200, temperature=0, extra_body={"ignore_eos": True}
        )
        base = client.completions.create(**{**kwargs, "max_tokens": 24}).choices[0].text
        stop = next(base[i : i + 2] for i in range(4, len(base) - 1) if "\ufffd" not in base[i : i + 2])
        engine = server.state.engine
        before, aborted_before = engine.stats.generation_tokens, engine.stats.aborted
        result = client.completions.create(**kwargs, stop=[stop])
        assert (
            result.choices[0].finish_reason == "stop" and result.choices[0].text == base[: base.index(stop)]
        )
        deadline = time.monotonic() + 10
        while (
            engine.stats.num_free_blocks != server.state.ready.num_blocks - 1 and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        assert engine.stats.num_running == 0
        assert engine.stats.aborted == aborted_before
        assert engine.stats.generation_tokens - before <= result.usage.completion_tokens + 16


def test_the_server_process_never_imports_torch():
    """Tokenizer from the model's metadata, model in the core: the API server stays light."""
    script = (
        "import sys, urllib.request, json\n"
        "from reference_engine.config import EngineConfig\n"
        "from reference_engine.core.launch import CoreLaunch\n"
        "from reference_engine.server.background import serve_in_background\n"
        "with serve_in_background(CoreLaunch(EngineConfig(model='tiny-random', num_blocks=32)), 'm') as s:\n"
        "    body = json.dumps({'prompt': 'hi', 'max_tokens': 3}).encode()\n"
        "    headers = {'Content-Type': 'application/json'}\n"
        "    r = urllib.request.Request(s.url + '/v1/completions', body, headers)\n"
        "    assert json.load(urllib.request.urlopen(r))['usage']['completion_tokens'] == 3\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_every_protocol_message_survives_msgpack():
    lp = TokenLogprob(7, -0.25, [(7, -0.25), (3, -1.5)])
    commands = [
        AddRequest(
            "r1",
            [1, 2, 3],
            SamplingParams(max_tokens=4, stop=["x"], n=2, seed=9),
            12.5,
            {"traceparent": "00-a-b-01"},
        ),
        AbortRequests(["r1", "r2"]),
        StopSequences([("r1", 1)]),
        Shutdown(),
    ]
    decode = msgspec.msgpack.Decoder(Command).decode
    assert [decode(msgspec.msgpack.encode(c)) for c in commands] == commands
    outputs = CoreOutputs(
        timestamp=3.25,
        outputs=[
            SeqOutput("r1", 0, [5], [lp], {1: lp}, None, SeqTiming(1.0, 2.0, None, 1, 16)),
            SeqOutput("r1", 1, [], finish_reason="abort", timing=SeqTiming(1.0, 2.0, 3.0, 0, 16)),
        ],
        stats=CoreStats(num_running=1, kv_usage=0.5, steps=4, generation_tokens=9, step_tokens=[3, 1]),
        rejected=[Rejection("r3", "too long", "prompt")],
        failure=None,
    )
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(outputs), type=CoreOutputs) == outputs
    ready = CoreReady("m", "src", 256, 100, 64, 16, "auto", True, "paged", "float32", 42)
    for message in (ready, CoreStartFailed("no such model")):
        assert msgspec.msgpack.decode(msgspec.msgpack.encode(message), type=Handshake) == message
