"""Every endpoint answers any JSON a client can send with a clear message, through plain HTTP (Gradio's
`/gradio_api/call/<name>` routes), including what `gradio_client` cannot send: lone surrogates, wrong types,
null, missing and extra arguments. After each request the server still translates."""

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from gradio_client import Client

from tests.conftest import model_rounding

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
    event, data = call(server, "trace", f'{{"data": {full(MODEL, "A dog runs.")}}}')
    assert event == "complete" and data[0]["translation"]


def full(*values) -> str:
    """A /trace request's data with every one of its 8 values (model, text, force, mask, contributions, src_lang,
    tgt_lang, units): the ones given, then nulls. A raw client sends them all, as gradio_client does, or names them
    (/call/v2/trace)."""
    return json.dumps(list(values) + [None] * (8 - len(values)))


SURROGATE_TEXT = "a dog \ud800 runs"  # a string holding a lone UTF-16 surrogate
TRACE_CASES = {  # name: (the JSON "data" list, a phrase of the expected error message)
    "lone surrogate in the text": (full(MODEL, SURROGATE_TEXT), "lone surrogate U+D800"),
    "a number for the text": (full(MODEL, 42), "must be a string, not int"),
    "a list for the text": (full(MODEL, ["a", "dog"]), "must be a string, not list"),
    "null for the text": (full(MODEL, None), "input is empty"),
    "a wrong model name": (full("no-such-model", "A dog."), "unknown model 'no-such-model'; loaded: toy-en-de"),
    "a number for the model": (full(7, "A dog."), "unknown model 7"),
    "null for the model": (full(None, "A dog."), "unknown model None"),
    "no arguments at all": ("[]", "didn't receive enough input values (needed: 8, got: 0)"),
    "too few arguments": (f'["{MODEL}", "A dog."]', "didn't receive enough input values (needed: 8, got: 2)"),
    "force as one string": (full(MODEL, "A dog.", "hund"), "force must be a list of strings, not str"),
    "force holding null": (full(MODEL, "A dog.", ["hund", None]), "it holds None"),
    "an unknown forced token": (full(MODEL, "A dog.", ["zebrafisch"]), "'zebrafisch' is not in the target"),
    "a forced lone surrogate": (full(MODEL, "A dog.", [SURROGATE_TEXT]), "lone surrogate"),
    "mask as a number": (full(MODEL, "A dog.", [], 3), "mask must be a list of strings, not int"),
    "an unknown head": (full(MODEL, "A dog.", [], ["cross.7.1"]), "head 'cross.7.1' does not exist"),
    "a malformed head name": (full(MODEL, "A dog.", None, ["cross"]), "'cross' is not a head name"),
    "a self-attention head of the GRU": (full("toy-rnn", "A dog.", None, ["decoder.1.1"]), "no 'decoder' attention"),
    "contributions as a string": (full(MODEL, "A dog.", None, None, "yes"), "contributions must be true or false"),
    "unknown units": (full(MODEL, "A dog.", None, None, None, None, None, "letters"), "units must be one of pieces"),
}


@pytest.mark.parametrize("name", TRACE_CASES)
def test_trace_answers_bad_requests_clearly(server, still_serving, name):
    data, message = TRACE_CASES[name]
    event, answer = call(server, "trace", f'{{"data": {data}}}')
    assert event == "error" and message in answer


def test_trace_takes_its_optional_arguments_as_nulls_or_by_name(server, services):
    expected = services.translators[MODEL].trace("A dog runs.").text
    for data in ([MODEL, "A dog runs.", None, None, None, None, None, None],
                 [MODEL, "A dog runs.", [], [], False, None, None, "pieces", "extra"]):
        event, answer = call(server, "trace", json.dumps({"data": data}))
        assert event == "complete" and answer[0]["translation"] == expected
    # Gradio's named form fills in what is left out.
    event, answer = call(server, "v2/trace", json.dumps({"model": MODEL, "text": "A dog runs."}))
    assert event == "complete" and answer[0]["translation"] == expected


def test_trace_gives_each_words_source_contribution_and_the_maps_on_request(server, services):
    translator = services.translators[MODEL]
    traced = translator.trace("A dog runs.")
    measured = translator.contributions("A dog runs.", traced.target_tokens)
    event, answer = call(server, "trace", f'{{"data": {full(MODEL, "A dog runs.")}}}')
    assert event == "complete" and "contributions" not in answer[0]
    # The API rounds to 4 decimals; the server's pass adds its sums in an order of its own.
    shown = 5e-5 + model_rounding(translator.model.config)
    np.testing.assert_allclose(answer[0]["source_contribution"], measured.source_contribution, atol=shown)
    event, answer = call(server, "trace", json.dumps({"data": [MODEL, "A dog runs.", None, None, True, None, None,
                                                               None]}))
    maps = answer[0]["contributions"]
    np.testing.assert_allclose(maps["decoder"], measured.decoder, atol=shown)
    assert np.array(maps["encoder"]).shape == (len(traced.source_tokens),) * 2
    event, answer = call(server, "trace", json.dumps({"data": ["toy-rnn", "A dog runs.", None, None, True, None,
                                                               None, None]}))
    assert answer[0]["source_contribution"] is None and answer[0]["contributions"] is None


def test_trace_and_attribute_in_words_and_pieces(server, services):
    translator = services.translators[MODEL]
    traced = translator.trace("A dog runs.")
    event, answer = call(server, "v2/trace", json.dumps({"model": MODEL, "text": "A dog runs.", "units": "words"}))
    assert event == "complete" and answer[0]["units"] == "words"
    words = answer[0]["source_words"]
    assert [piece for word in words for piece in word["pieces"]] == list(range(len(traced.source_tokens)))
    cross = np.array(answer[0]["cross_attention"])
    assert cross.shape[-2:] == (len(answer[0]["target_words"]), len(words))
    np.testing.assert_allclose(cross.sum(-1), 1, atol=1e-3)
    event, answer = call(server, "v2/attribute", json.dumps({"model": MODEL, "text": "A dog runs.",
                                                             "method": "integrated_gradients", "step": 2}))
    assert event == "complete", answer
    (step,) = answer[0]["steps"]
    assert step["step"] == 2 and step["token"] == traced.target_tokens[1]
    assert len(step["source"]) == len(traced.source_tokens) and len(step["target"]) == 2
    total = sum(step["source"]) + sum(step["target"])
    assert abs(total - (step["score"] - step["baseline_score"])) == pytest.approx(abs(step["completeness_error"]),
                                                                                abs=1e-3)
    for bad, message in (({"method": "lime"}, "Unknown attribution method"), ({"step": 99}, "The step must be"),
                         ({"contrast": "zebrafisch☃"}, "The contrast must be one token"),
                         ({"units": "letters"}, "units must be one of")):
        event, answer = call(server, "v2/attribute", json.dumps({"model": MODEL, "text": "A dog runs.", **bad}))
        assert event == "error" and message in answer, (bad, answer)


def test_attribute_explains_a_translation_given_to_it(server, services):
    """`target` (a text, or tokens) is forced and explained instead of the greedy translation, as inseq does with a
    reference: its steps are the given tokens, each attribution the one of that forced token."""
    translator = services.translators[MODEL]
    greedy = translator.trace("A dog runs.").target_tokens
    other = next(t for t in translator.trace("A dog runs.").top_tokens[1] if t != greedy[1])
    given = [greedy[0], other, *greedy[2:-1]]
    expected = translator.attributions("A dog runs.", [*given, "<eos>"], "saliency", None, None, None)
    for target in (given, " ".join(given)):
        event, answer = call(server, "v2/attribute", json.dumps({"model": MODEL, "text": "A dog runs.",
                                                                 "method": "saliency", "target": target}))
        assert event == "complete", answer
        assert answer[0]["explained"] == "target" and answer[0]["target_tokens"] == [*given, "<eos>"]
        assert [step["token"] for step in answer[0]["steps"]] == [*given, "<eos>"]
        # 4 decimals, and a gradient of values of its size added up in another order on the server's thread
        shown = 5e-5 + model_rounding(translator.model.config, scale=np.abs(expected[1].source).max())
        np.testing.assert_allclose(answer[0]["steps"][1]["source"], expected[1].source, atol=shown)
    event, answer = call(server, "v2/attribute", json.dumps({"model": MODEL, "text": "A dog runs.", "target": 7}))
    assert event == "error" and "target must be a translation" in answer


def test_patch_answers_each_heads_effect_over_raw_http(server, services):
    """`/patch` patches every head at the step where the two translations part (or the step asked) and answers
    the grids as JSON numbers, null where a kind cannot be patched, with the reason."""
    translator = services.translators[MODEL]
    body = {"model": MODEL, "text": "A man plays with a red ball.", "counterfactual": "A woman plays with a red ball."}
    event, answer = call(server, "v2/patch", json.dumps(body))
    assert event == "complete", answer
    [result] = answer
    tokens = result["target_tokens"]
    expected = translator.patching(body["text"], body["counterfactual"], tokens, result["step"] - 1)
    ours, theirs = result["target_tokens"], result["counterfactual_tokens"]
    first = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)  # where the two token lists part
    assert ours[:first] == theirs[:first] and ours[first] != theirs[first]
    assert result["parted_at"] == first + 1 == result["step"] and result["skipped"] == {}
    np.testing.assert_allclose(result["effects"]["cross"], expected.effects["cross"], atol=1e-5)
    event, answer = call(server, "v2/patch", json.dumps({**body, "counterfactual": "A young woman plays.", "step": 1,
                                                         "contrast": tokens[0]}))
    assert event == "complete" and answer[0]["effects"]["encoder"][0][0] is None
    counted = [len(translator.source_tokens(text)) + 1 for text in (body["text"], "A young woman plays.")]  # <eos>
    assert answer[0]["skipped"] == {"encoder": f"The sentence has {counted[0]} tokens and the counterfactual "
                                               f"{counted[1]}: encoder heads work at source positions, so they are "
                                               "patched only between sources of as many tokens."}
    # estimated: attribution patching's grids, marked as estimates, close to the patched runs' on this step
    event, answer = call(server, "v2/patch", json.dumps({**body, "estimate": True}))
    assert event == "complete" and answer[0]["estimated"] is True and result["estimated"] is False
    estimated = np.array(answer[0]["effects"]["cross"]).ravel()
    assert np.corrcoef(estimated, np.array(result["effects"]["cross"]).ravel())[0, 1] > 0.8
    for bad, message in (({"step": "two"}, "step must be a whole number"), ({"step": 99}, "The step must be"),
                         ({"counterfactual": 5}, "counterfactual"), ({"contrast": "x y z"}, "The contrast must be"),
                         ({"estimate": "yes"}, "estimate must be true or false")):
        event, answer = call(server, "v2/patch", json.dumps({**body, **bad}))
        assert event == "error" and message in answer, (bad, answer)


def test_trace_forces_and_masks(server, services):
    translator = services.translators[MODEL]
    expected = translator.trace("A dog runs.", force=["ein", "kind"], mask=["cross.1.1", "encoder.2.3"])
    event, answer = call(server, "trace", json.dumps({"data": [MODEL, "A dog runs.", ["ein", "kind"],
                                                               ["encoder.2.3", "cross.1.1"], None, None, None,
                                                               None]}))
    assert event == "complete"
    result = answer[0]
    assert result["target_tokens"][:2] == ["ein", "kind"] and result["forced"] == 2
    assert result["target_tokens"] == expected.target_tokens and result["mask"] == ["cross.1.1", "encoder.2.3"]


def test_score_returns_teacher_forced_log_probabilities(server, services):
    traced = services.translators[MODEL].trace("A dog runs.")
    event, answer = call(server, "score", json.dumps({"data": [MODEL, "A dog runs.", traced.target_tokens, None, None,
                                                               None]}))
    assert event == "complete"
    result = answer[0]
    assert result["target_tokens"] == traced.target_tokens and result["mask"] == []
    assert result["log_probabilities"] == pytest.approx(list(np.log(traced.trace.probabilities)), abs=1e-5)
    assert result["total_log_probability"] == pytest.approx(sum(result["log_probabilities"]), abs=1e-5)
    for data, message in [([MODEL, "A dog runs."], "list is empty"), ([MODEL, "A dog.", "hund"], "list of strings"),
                          ([MODEL, "A dog.", ["zebrafisch"]], "Target token 'zebrafisch' is not in"),
                          ([MODEL, "A dog.", ["hund"], ["cross.9.9"]], "does not exist"),
                          (["nope", "A dog.", ["hund"]], "unknown model 'nope'")]:
        event, answer = call(server, "score", json.dumps({"data": data + [None] * (6 - len(data))}))
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
    "too few values": ("translate", f'["{MODEL}", "A dog."]', "didn't receive enough input values", True),
    "an old display label for the kind": ("translate", f'["{MODEL}", "A dog.", "Cross-attention", 0, "mean", '
                                          '"weights", 1, false, "pieces", null]',
                                          "Unknown attention kind 'Cross-attention'; choose one of: encoder, decoder, "
                                          "cross.", False),
    "an old display label for the measure": ("kind", '["cross", 0, "mean", "contributions (ALTI+)", 1, false, '
                                                     '"pieces", null]',
                                             "Unknown measure 'contributions (ALTI+)'; choose one of: weights, "
                                             "value_norm, rollout, alti, saliency, input_x_gradient, "
                                             "integrated_gradients.", False),
    "a layer the model does not have": ("translate", f'["{MODEL}", "A dog.", "cross", 9, "mean", "weights", 1, '
                                        'false, "pieces", null]', "Translated.", False),
    "a word for the layer": ("layer", '["cross", "three", "mean", "weights", 1, false, "pieces", null]',
                             "Translate a sentence first", False),
    "a lone surrogate to translate": ("translate", f'["{MODEL}", {SURROGATE}, "cross", 0, "mean", "weights", 1, '
                                                   'false, "pieces", null]', "lone surrogate", False),
    "an unknown model to translate": ("translate", '["nope", "A dog.", "cross", 0, "mean", "weights", 1, false, '
                                                   '"pieces", null]',
                                      "Choose a model: 'nope' is not loaded.", False),
    "a view before any translation": ("kind", '["cross", 0, "mean", "weights", 1, false, "pieces", null]',
                                      "Translate a sentence first", False),
    "a word for the step": ("head", '["cross", 0, "mean", "weights", "three", false, "pieces", null]',
                            "The step must be a number, not 'three'.", False),
    "null everywhere": ("translate", "[null, null, null, null, null, null, null, null, null, null]",
                        "Unknown attention kind None; choose one of: encoder, decoder, cross.", False),
    "unknown units": ("units", '["cross", 0, "mean", "weights", 1, false, "letters", null]',
                      "Unknown units 'letters'; choose one of: pieces, words.", False),
    "a list for the sentence": ("translate", f'["{MODEL}", ["A", "dog"], "cross", 0, "mean", "weights", 1, false, '
                                             '"pieces", null]',
                                "The text to translate must be a string, not list.", False),
}


@pytest.mark.parametrize("name", UI_CASES)
def test_ui_events_answer_bad_requests_clearly(server, still_serving, name):
    endpoint, data, message, as_error = UI_CASES[name]
    event, answer = call(server, endpoint, f'{{"data": {data}}}')
    if as_error:
        assert event == "error" and answer and message in answer, answer
    else:
        assert event == "complete" and message in texts(answer), answer


JUNK = {  # the values a client can put in "data", each sent in every position of every endpoint
    "nothing": [], "null": [None], "a number": [123456789], "a float": [1e308], "a list": [["a", None]],
    "an object": [{"value": "x"}], "a lone surrogate": ["\ud800"], "markup": ["<img src=x onerror=alert(1)>"],
}


def endpoints(server: str) -> dict[str, int]:
    """Every named endpoint the running app answers, listed or not, with how many values a client sends it (the
    page's config: each event's inputs but the session's state, which the server keeps)."""
    config = httpx.get(f"{server.rstrip('/')}/config", timeout=30).json()
    kinds = {component["id"]: component["type"] for component in config["components"]}
    return {event["api_name"]: sum(kinds[i] != "state" for i in event["inputs"]) for event in config["dependencies"]
            if event.get("api_name") and event.get("api_visibility", "public") != "private"}


def test_the_api_page_lists_the_api_alone_and_each_answers_by_name(server, services):
    """Gradio's "Use via API" page and gradio_client's view_api list /trace, /detach, /score, /beam, /attribute,
    /patch and /neuron, with their parameters named; the page's own events are not offered there (they stay callable,
    as the page calls them)."""
    client = Client(server, verbose=False)
    listed = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert set(listed) == {"/trace", "/detach", "/score", "/beam", "/attribute", "/patch", "/neuron"}
    assert [p["parameter_name"] for p in listed["/patch"]["parameters"]][:3] == ["model", "text", "counterfactual"]
    text = "A man plays with a red ball."
    traced = client.predict(MODEL, text, api_name="/trace")
    assert client.predict(MODEL, text, traced["target_tokens"], api_name="/score")["target_tokens"] == \
        traced["target_tokens"]
    assert client.predict(MODEL, text, 2, api_name="/beam")["n_best"]
    assert client.predict(MODEL, text, traced["target_tokens"], api_name="/detach")["scores"] == \
        traced["detachment"]["scores"]
    assert client.predict(MODEL, text, "saliency", 1, api_name="/attribute")["steps"][0]["step"] == 1
    assert client.predict(MODEL, text, "A woman plays with a red ball.", api_name="/patch")["effects"]["cross"]
    assert client.predict(MODEL, text, "cross", 1, 1, 0, api_name="/neuron")["weights"] == \
        pytest.approx(traced["cross_attention"][0][0][0], abs=1e-4)
    assert {"translate", "layer", "first_visit", "patch_view"} <= set(endpoints(server))  # not listed, answered


def test_every_endpoint_answers_junk_with_a_result_or_a_message(server, still_serving):
    offered = endpoints(server)
    assert {"trace", "detach", "score", "beam", "attribute", "patch", "translate", "switch_model", "first_visit",
            "kind", "layer", "head", "measure", "model_view", "units"} <= set(offered)
    # each junk value in every position of every endpoint; the lone surrogate kept an escape in the raw body
    cases = [(endpoint, name, json.dumps({"data": junk * count}).replace("\\\\ud800", "\\ud800"))
             for endpoint, count in offered.items() for name, junk in JUNK.items()]
    with ThreadPoolExecutor(3) as clients:  # three at once, under the app's bound (a "busy" would fail below)
        answers = clients.map(lambda case: call(server, case[0], case[2]), cases)
        for (endpoint, name, _), (event, answer) in zip(cases, answers):
            assert event == "complete" or (event in ("error", "422") and answer), (endpoint, name, event, answer)
            assert "busy" not in str(answer), (endpoint, name, answer)


# ---- the page's own requests: queue=False events, answered at once, bounded by the app's admission ----

def predict(server: str, endpoint: str, data: list, session: str) -> tuple[int, object]:
    """A request as the page sends a `queue=False` event: one POST to /gradio_api/run/<endpoint>, in a session (a null
    where the event takes the session's state, which the server keeps)."""
    answer = httpx.post(f"{server.rstrip('/')}/gradio_api/run/{endpoint}", timeout=60,
                        json={"data": [None, *data], "session_hash": session})
    return answer.status_code, answer.json()


def core_view(outputs: list) -> dict:
    """The core view's one value among an answer's outputs (ui/plots.py `core_view`)."""
    return next(json.loads(value) for value in outputs if isinstance(value, str) and value.startswith('{"revision"'))


def rows(view_outputs: list) -> list[str]:
    """The rows of a view change's heatmap (in the core view's value)."""
    return json.loads(core_view(view_outputs)["attention"])["layout"]["yaxis"]["categoryarray"]


def test_each_page_session_keeps_its_own_session(server, services):
    sentences = {"page-one": "A dog runs.", "page-two": "A man sits in the park."}
    for session, text in sentences.items():
        status, answer = predict(server, "translate",
                                 [MODEL, text, "cross", 0, "mean", "weights", 1, False, "pieces", None], session)
        expected = services.translators[MODEL].trace(text).text
        assert status == 200 and core_view(answer["data"])["translation"] == expected
    for session, text in sentences.items():
        expected = services.translators[MODEL].trace(text).decoder_input_tokens
        status, answer = predict(server, "head", ["cross", 0, 1, "weights", 1, False, "pieces", None], session)
        assert status == 200 and len(rows(answer["data"])) == len(expected)
        event, answer = call(server, "head", json.dumps({"data": ["decoder", 0, 1, "weights", 1, False, "pieces", None],
                                                        "session_hash": session}))  # through the queue too
        assert event == "complete" and len(rows(answer)) == len(expected)


def test_neuron_answers_the_vectors_behind_a_row_over_raw_http_as_the_python_api_does(server, services):
    """/neuron's answer equals `Model.neuron`'s; its weights are /trace's row to /trace's rounding, the softmax of
    its scores; a later step in decoder self-attention is masked (null), never a score of -inf."""
    from attention_inspector.api import Model

    text = "A man plays with a red ball."
    event, answer = call(server, "neuron", json.dumps({"data": [MODEL, text, "decoder", 2, 3, 1, None, None, None,
                                                                None]}))
    assert event == "complete"
    result = answer[0]
    assert result == Model(services.translators[MODEL], MODEL).neuron(text, "decoder", 2, 3, 1)
    traced = services.translators[MODEL].trace(text)
    shown = 5e-7 + model_rounding(services.translators[MODEL].model.config)  # 6 decimals, another pass
    assert result["weights"] == pytest.approx(traced.trace.decoder_attention[1, 2, 1], abs=shown)
    assert result["key_tokens"] == traced.decoder_input_tokens
    assert result["query_token"] == traced.decoder_input_tokens[1] and (result["layer"], result["head"]) == (2, 3)
    assert result["masked"] == [False, False] + [True] * (len(traced.target_tokens) - 2)
    assert result["scores"][2:] == [None] * (len(traced.target_tokens) - 2) and result["weights"][2] == 0
    seen = np.array(result["scores"][:2])
    assert np.exp(seen - seen.max()) / np.exp(seen - seen.max()).sum() == pytest.approx(result["weights"][:2],
                                                                                         abs=1e-5)
    assert np.sum(result["products"][0]) == pytest.approx(result["scores"][0], abs=1e-4)
    d_head = services.translators[MODEL].model.config.d_head
    assert len(result["query_vector"]) == len(result["key_vectors"][0]) == d_head
    for data, message in [([MODEL, text, "encoder", 1, 1, 99], "query must be a row of the heatmap"),
                          ([MODEL, text, "cross", 3, 1, 0], "The layer must be a whole number from 1 to 2"),
                          ([MODEL, text, "self", 1, 1, 0], "Unknown attention kind 'self'"),
                          ([MODEL, text, "cross", 1, 1, "0"], "not '0'"),
                          (["toy-rnn", text, "encoder", 1, 1, 0], "has no encoder self-attention"),
                          ([MODEL, "", "cross", 1, 1, 0], "input is empty")]:
        event, answer = call(server, "neuron", json.dumps({"data": data + [None] * 4}))
        assert event == "error" and message in answer, (data, answer)
