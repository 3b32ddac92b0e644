"""Every endpoint answers any JSON a client can send with a clear message, through plain HTTP (Gradio's
`/gradio_api/call/<name>` routes), including what `gradio_client` cannot send: lone surrogates, wrong types,
null, missing and extra arguments. After each request the server still translates."""

import json

import httpx
import numpy as np
import pytest

from viz.attention import escape

MODEL = "toy-en-de"
SURROGATE = '"a dog \\ud800 runs"'  # JSON text of a string holding a lone UTF-16 surrogate


def call(server: str, endpoint: str, body: str) -> tuple[str, object]:
    """POST a raw JSON body, then read the result stream: ("complete", data), ("error", message) or (status, detail)."""
    with httpx.Client(base_url=server, timeout=60) as client:
        posted = client.post(f"/gradio_api/call/{endpoint}", content=body.encode("utf-8", "surrogatepass"),
                             headers={"Content-Type": "application/json"})
        if posted.status_code != 200:
            return str(posted.status_code), posted.json()["detail"]
        event = None
        with client.stream("GET", f"/gradio_api/call/{endpoint}/{posted.json()['event_id']}") as stream:
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    event = line.removeprefix("event:").strip()
                elif line.startswith("data:") and event in ("complete", "error"):
                    data = json.loads(line.removeprefix("data:"))
                    return event, (data["error"] if event == "error" else data)
    raise AssertionError(f"no result from {endpoint}")


def texts(value) -> str:
    """Every string inside a nested answer, joined: where a status message can be looked for."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return " ".join(texts(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(texts(v) for v in value)
    return ""


@pytest.fixture
def still_serving(server):
    yield
    event, data = call(server, "trace", json.dumps({"data": [MODEL, "A dog runs."]}))
    assert event == "complete" and data[0]["translation"]


TRACE_CASES = {  # name: (the JSON "data" list, a phrase of the expected error message)
    "lone surrogate in the text": (f'["{MODEL}", {SURROGATE}]', "lone surrogate U+D800"),
    "a number for the text": (f'["{MODEL}", 42]', "must be a string, not int"),
    "a list for the text": (f'["{MODEL}", ["a", "dog"]]', "must be a string, not list"),
    "null for the text": (f'["{MODEL}", null]', "input is empty"),
    "a wrong model name": ('["no-such-model", "A dog."]', "unknown model 'no-such-model'; loaded: toy-en-de"),
    "a number for the model": ('[7, "A dog."]', "unknown model 7"),
    "null for the model": ('[null, "A dog."]', "unknown model None"),
    "no arguments at all": ("[]", "unknown model None"),
    "force as one string": (f'["{MODEL}", "A dog.", "hund"]', "force must be a list of strings, not str"),
    "force holding null": (f'["{MODEL}", "A dog.", ["hund", null]]', "it holds None"),
    "an unknown forced token": (f'["{MODEL}", "A dog.", ["zebrafisch"]]', "'zebrafisch' is not in the target"),
    "a forced lone surrogate": (f'["{MODEL}", "A dog.", [{SURROGATE}]]', "lone surrogate"),
    "mask as a number": (f'["{MODEL}", "A dog.", [], 3]', "mask must be a list of strings, not int"),
    "an unknown head": (f'["{MODEL}", "A dog.", [], ["cross.7.1"]]', "head 'cross.7.1' does not exist"),
    "a malformed head name": (f'["{MODEL}", "A dog.", null, ["cross"]]', "'cross' is not a head name"),
    "a self-attention head of the GRU": ('["toy-rnn", "A dog.", null, ["decoder.1.1"]]', "no 'decoder' attention"),
    "contributions as a string": (f'["{MODEL}", "A dog.", null, null, "yes"]', "contributions must be true or false"),
}


@pytest.mark.parametrize("name", TRACE_CASES)
def test_trace_answers_bad_requests_clearly(server, still_serving, name):
    data, message = TRACE_CASES[name]
    event, answer = call(server, "trace", f'{{"data": {data}}}')
    assert event == "error" and message in answer


def test_trace_fills_missing_optional_arguments_and_ignores_extra_ones(server, app_module):
    expected = app_module.TRANSLATORS[MODEL].trace("A dog runs.").text
    for data in ([MODEL, "A dog runs."], [MODEL, "A dog runs.", None, None],
                 [MODEL, "A dog runs.", [], [], False, "x"]):
        event, answer = call(server, "trace", json.dumps({"data": data}))
        assert event == "complete" and answer[0]["translation"] == expected


def test_trace_gives_each_words_source_contribution_and_the_maps_on_request(server, app_module):
    translator = app_module.TRANSLATORS[MODEL]
    traced = translator.trace("A dog runs.")
    measured = translator.contributions("A dog runs.", traced.target_tokens)
    event, answer = call(server, "trace", json.dumps({"data": [MODEL, "A dog runs."]}))
    assert event == "complete" and "contributions" not in answer[0]
    np.testing.assert_allclose(answer[0]["source_contribution"], measured.source_contribution, atol=1e-4)
    event, answer = call(server, "trace", json.dumps({"data": [MODEL, "A dog runs.", None, None, True]}))
    maps = answer[0]["contributions"]
    np.testing.assert_allclose(maps["decoder"], measured.decoder, atol=1e-4)
    assert np.array(maps["encoder"]).shape == (len(traced.source_tokens),) * 2
    event, answer = call(server, "trace", json.dumps({"data": ["toy-rnn", "A dog runs.", None, None, True]}))
    assert answer[0]["source_contribution"] is None and answer[0]["contributions"] is None


def test_trace_forces_and_masks(server, app_module):
    translator = app_module.TRANSLATORS[MODEL]
    expected = translator.trace("A dog runs.", force=["ein", "kind"], mask=["cross.1.1", "encoder.2.3"])
    event, answer = call(server, "trace", json.dumps({"data": [MODEL, "A dog runs.", ["ein", "kind"],
                                                               ["encoder.2.3", "cross.1.1"]]}))
    assert event == "complete"
    result = answer[0]
    assert result["target_tokens"][:2] == ["ein", "kind"] and result["forced"] == 2
    assert result["target_tokens"] == expected.target_tokens and result["mask"] == ["cross.1.1", "encoder.2.3"]


def test_score_returns_teacher_forced_log_probabilities(server, app_module):
    traced = app_module.TRANSLATORS[MODEL].trace("A dog runs.")
    event, answer = call(server, "score", json.dumps({"data": [MODEL, "A dog runs.", traced.target_tokens]}))
    assert event == "complete"
    result = answer[0]
    assert result["target_tokens"] == traced.target_tokens and result["mask"] == []
    assert result["log_probabilities"] == pytest.approx(list(np.log(traced.trace.probabilities)), abs=1e-5)
    assert result["total_log_probability"] == pytest.approx(sum(result["log_probabilities"]), abs=1e-5)
    for data, message in [([MODEL, "A dog runs."], "list is empty"), ([MODEL, "A dog.", "hund"], "list of strings"),
                          ([MODEL, "A dog.", ["zebrafisch"]], "Target token 'zebrafisch' is not in"),
                          ([MODEL, "A dog.", ["hund"], ["cross.9.9"]], "does not exist"),
                          (["nope", "A dog.", ["hund"]], "unknown model 'nope'")]:
        event, answer = call(server, "score", json.dumps({"data": data}))
        assert event == "error" and message in answer, (data, answer)


@pytest.mark.parametrize("body,status,message", [
    ('{"data": "A dog."}', "422", "list"),
    ('{"nodata": []}', "422", "data"),
    ("[1, 2]", "422", "dict"),
    ("not json at all", "422", "JSON"),
])
def test_malformed_bodies_are_refused_with_a_reason(server, still_serving, body, status, message):
    answer_status, detail = call(server, "trace", body)
    assert answer_status == status and message.lower() in json.dumps(detail).lower()


UI_CASES = {  # endpoint, data, a phrase of the expected message, and whether it arrives as an error or a status
    "too few values": ("translate", f'["{MODEL}", "A dog."]', "This request sent 2 values; this endpoint takes", True),
    "a layer not offered": ("translate", f'["{MODEL}", "A dog.", "Cross-attention", 9, "Mean of heads", false]',
                            "not in the list of choices", True),
    "an attention kind not offered": ("translate", f'["{MODEL}", "A dog.", "Sideways", 0, "Mean of heads", false]',
                                      "not in the list of choices", True),
    "a word for the layer": ("layer", '["Cross-attention", "three", "Mean of heads", false]',
                             "three is not in the list of choices", True),
    "a list for the head": ("head", '["Cross-attention", 0, [1], false]', "is not in the list of choices", True),
    "a lone surrogate to translate": ("translate", f'["{MODEL}", {SURROGATE}, "Cross-attention", 0, "Mean of heads", '
                                                   'false]', "lone surrogate", False),
    "an unknown model to translate": ("translate", '["nope", "A dog.", "Cross-attention", 0, "Mean of heads", false]',
                                      "nope is not in the list of choices", True),
    "a view before any translation": ("kind", '["Cross-attention", 0, "Mean of heads", false]',
                                      "Translate a sentence first", False),
    "null everywhere": ("translate", "[null, null, null, null, null, null]", "is not loaded", False),
}


@pytest.mark.parametrize("name", UI_CASES)
def test_ui_events_answer_bad_requests_clearly(server, still_serving, name):
    endpoint, data, message, as_error = UI_CASES[name]
    event, answer = call(server, endpoint, f'{{"data": {data}}}')
    if as_error:
        assert event == "error" and message in answer
    else:
        assert event == "complete" and message in texts(answer)


JUNK = {  # the values a client can put in "data", each sent in every position of every endpoint
    "nothing": [], "null": [None], "a number": [123456789], "a float": [1e308], "a list": [["a", None]],
    "an object": [{"value": "x"}], "a lone surrogate": ["\ud800"], "markup": ["<img src=x onerror=alert(1)>"],
}


def endpoints(server: str) -> dict[str, int]:
    """Every named endpoint the running app offers, with how many values it takes."""
    info = httpx.get(f"{server.rstrip('/')}/gradio_api/info", timeout=30).json()
    return {name.lstrip("/"): len(spec["parameters"]) for name, spec in info["named_endpoints"].items()}


def test_every_endpoint_answers_junk_with_a_result_or_a_message(server, still_serving):
    offered = endpoints(server)
    assert {"trace", "score", "translate", "switch_model", "first_visit", "kind", "layer", "head",
            "model_view"} <= set(offered)
    for endpoint, count in offered.items():
        for name, junk in JUNK.items():
            data = junk * count
            body = json.dumps({"data": data}).replace("\\\\ud800", "\\ud800")  # keep the surrogate an escape
            event, answer = call(server, endpoint, body)
            assert event == "complete" or (event in ("error", "422") and answer), (endpoint, name, event, answer)


# ---- the direct routes the page sends translations and view changes to ----

def direct(server: str, endpoint: str, body: str, session: str | None = "direct-test") -> tuple[int, object]:
    """POST a raw JSON {"session_hash", "data"} body to a direct route: (status, data) or (status, error)."""
    if session is not None:
        body = f'{{"session_hash": "{session}", "data": {body}}}'
    answer = httpx.post(f"{server.rstrip('/')}/direct/{endpoint}", content=body.encode("utf-8", "surrogatepass"),
                        headers={"Content-Type": "application/json"}, timeout=60)
    return answer.status_code, answer.json().get("data", answer.json().get("error"))


VIEW = '["Cross-attention", 0, 1, false, "weights"]'  # head 2 of the stored trace


def rows(view_outputs: list) -> list[str]:
    """The decoder tokens labelling a view change's heatmap rows."""
    return json.loads(view_outputs[2]["attention"])["layout"]["yaxis"]["ticktext"]


def test_a_direct_translation_is_what_the_gradio_event_answers(server, app_module):
    settings = '"Cross-attention", 0, "Mean of heads", false'
    status, answer = direct(server, "translate", f'["{MODEL}", "A dog runs.", {settings}]', session="same-a")
    event, expected = call(server, "translate", f'{{"data": ["{MODEL}", "A dog runs.", {settings}], '
                                                '"session_hash": "same-b"}')
    assert status == 200 and event == "complete"
    outputs = next(fn for fn in app_module.demo.fns.values() if fn.api_name == "translate").outputs
    assert answer == [value for value, output in zip(expected, outputs) if not output.stateful]
    assert answer[0] == app_module.TRANSLATORS[MODEL].trace("A dog runs.").text


def test_each_page_session_keeps_its_own_trace_for_its_gradio_events(server, app_module):
    translator = app_module.TRANSLATORS[MODEL]
    sentences = {"page-one": "A dog runs.", "page-two": "A man sits in the park."}
    for session, text in sentences.items():
        status, _ = direct(server, "translate", f'["{MODEL}", "{text}", "Cross-attention", 0, "Mean of heads", false]',
                           session=session)
        assert status == 200
    for session, text in sentences.items():
        expected = escape(translator.trace(text).decoder_input_tokens)
        status, answer = direct(server, "head", VIEW, session=session)  # a direct view change
        assert status == 200 and rows(answer) == expected
        event, answer = call(server, "head", f'{{"data": {VIEW}, "session_hash": "{session}"}}')  # Gradio's own
        assert event == "complete" and rows(answer) == expected


@pytest.mark.parametrize("name", UI_CASES)
def test_direct_routes_answer_bad_requests_as_their_gradio_events_do(server, still_serving, name):
    endpoint, data, message, as_error = UI_CASES[name]
    status, answer = direct(server, endpoint, data, session=f"bad-{len(name)}")
    if as_error:
        assert status == 400 and message in answer
    else:
        assert status == 200 and message in texts(answer)


@pytest.mark.parametrize("endpoint,body,status,message", [
    ("translate", "not json at all", 400, "Send JSON"),
    ("translate", '{"data": []}', 400, "session_hash"),
    ("translate", '{"session_hash": 7, "data": []}', 400, "session_hash"),
    ("translate", f'{{"session_hash": "{"x" * 65}", "data": []}}', 400, "session_hash"),
    ("translate", '{"session_hash": "s", "data": "A dog."}', 400, "data"),
    ("branch", '{"session_hash": "s", "data": []}', 404, "no direct route for 'branch'"),
    ("nothing-here", '{"session_hash": "s", "data": []}', 404, "no direct route"),
])
def test_direct_routes_refuse_malformed_bodies_with_a_reason(server, still_serving, endpoint, body, status, message):
    answer_status, answer = direct(server, endpoint, body, session=None)
    assert answer_status == status and message in answer


def test_direct_routes_answer_junk_with_a_result_or_a_message(server, still_serving, app_module):
    offered = endpoints(server)
    for endpoint in app_module.demo.direct_events:
        for name, junk in JUNK.items():
            body = json.dumps(junk * offered[endpoint]).replace("\\\\ud800", "\\ud800")
            status, answer = direct(server, endpoint, body, session="junk")
            assert (status, isinstance(answer, list)) == (200, True) or (status == 400 and answer), (endpoint, name)
