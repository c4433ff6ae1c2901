"""The fake Gemini API is honest: its answers are google-genai's own types, the
official SDK client works against it, and it refuses what Google refuses."""

from __future__ import annotations

import httpx
import orjson
import pytest
from google import genai
from google.genai import errors as gerrors
from google.genai import types as gt

from fakes.gemini_backend import FAKE_API_KEY, server_thread

MODEL = "gemini-2.5-flash"
USER = [{"role": "user", "parts": [{"text": "hello"}]}]
WEATHER_DECL = {
    "name": "get_weather",
    "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="module")
def fake():
    with server_thread("fake-gemini") as server:
        yield server


@pytest.fixture(scope="module")
def api(fake):
    with httpx.Client(base_url=fake.url + "/v1beta", headers={"x-goog-api-key": FAKE_API_KEY}, timeout=10) as client:
        yield client


def generate(api, body: dict, method: str = "generateContent", model: str = MODEL) -> httpx.Response:
    return api.post(f"/models/{model}:{method}", json=body)


def test_answers_are_sdk_types(api) -> None:
    r = generate(
        api,
        {
            "contents": USER,
            "generationConfig": {
                "candidateCount": 2,
                "thinkingConfig": {"thinkingBudget": 100, "includeThoughts": True},
            },
        },
    )
    assert r.status_code == 200
    resp = gt.GenerateContentResponse.model_validate(r.json())
    assert len(resp.candidates) == 2 and resp.candidates[0].content.parts[0].thought is True
    assert resp.usage_metadata.thoughts_token_count == 7
    r = generate(
        api,
        {
            "contents": [{"role": "user", "parts": [{"text": "weather?"}]}],
            "tools": [{"functionDeclarations": [WEATHER_DECL]}],
        },
    )
    call = gt.GenerateContentResponse.model_validate(r.json()).candidates[0].content.parts[0]
    assert call.function_call.name == "get_weather" and call.thought_signature
    r = generate(api, {"contents": [{"role": "user", "parts": [{"text": "blocked-prompt"}]}]})
    assert gt.GenerateContentResponse.model_validate(r.json()).prompt_feedback.block_reason == "SAFETY"
    r = api.post(f"/models/{MODEL}:streamGenerateContent?alt=sse", json={"contents": USER})
    frames = [orjson.loads(line[6:]) for line in r.content.split(b"\r\n\r\n") if line]
    assert len(frames) == 5
    for obj in frames:
        gt.GenerateContentResponse.model_validate(obj)
    assert frames[-1]["candidates"][0]["finishReason"] == "STOP"
    r = generate(api, {"contents": USER}, "countTokens")
    gt.CountTokensResponse.model_validate(r.json())
    r = generate(
        api, {"content": {"parts": [{"text": "x"}]}, "outputDimensionality": 3}, "embedContent", "gemini-embedding-001"
    )
    assert len(gt.ContentEmbedding.model_validate(r.json()["embedding"]).values) == 3
    r = generate(
        api,
        {"requests": [{"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "x"}]}}]},
        "batchEmbedContents",
        "gemini-embedding-001",
    )
    assert len(gt.EmbedContentResponse.model_validate(r.json()).embeddings) == 1


def test_the_official_sdk_works_against_it(fake) -> None:
    client = genai.Client(api_key=FAKE_API_KEY, http_options={"base_url": fake.url})
    out = client.models.generate_content(
        model=MODEL, contents="hi", config=gt.GenerateContentConfig(system_instruction="be brief")
    )
    assert out.text == "Hello from fake-gemini. This is a demo reply."
    assert "".join(c.text for c in client.models.generate_content_stream(model=MODEL, contents="hi")) == out.text
    assert client.models.count_tokens(model=MODEL, contents="one two three").total_tokens == 3
    emb = client.models.embed_content(
        model="gemini-embedding-001", contents=["a", "b"], config={"output_dimensionality": 4}
    )
    assert [len(e.values) for e in emb.embeddings] == [4, 4]
    assert [m.name for m in client.models.list()] == ["models/gemini-2.5-flash", "models/gemini-embedding-001"]

    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny in " + city

    # automatic function calling: call, function response, answer — three turns checked by the fake
    out = client.models.generate_content(
        model=MODEL, contents="weather in Paris?", config=gt.GenerateContentConfig(tools=[get_weather])
    )
    assert out.text == "Hello from fake-gemini. This is a demo reply."
    assert len(out.automatic_function_calling_history) == 3
    wrong = genai.Client(api_key="wrong", http_options={"base_url": fake.url})
    with pytest.raises(gerrors.ClientError) as info:
        wrong.models.generate_content(model=MODEL, contents="hi")
    assert info.value.code == 400 and "API key not valid" in info.value.message


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}, "valid role"),
        ({"contents": USER, "temperature": 1}, 'Unknown name "temperature"'),
        ({"contents": [{"role": "user", "parts": []}]}, "must not be empty"),
        (
            {"contents": [{"role": "user", "parts": [{"text": "x", "inlineData": {"mimeType": "a/b", "data": ""}}]}]},
            "more than one",
        ),
        (
            {"contents": [*USER, {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]},
            "function response turn comes immediately after a function call turn",
        ),
        (
            {
                "contents": [
                    *USER,
                    {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
                    {"role": "user", "parts": [{"functionResponse": {"name": "g", "response": {}}}]},
                ]
            },
            "number of function response parts",
        ),
        (
            {
                "contents": USER,
                "tools": [
                    {
                        "functionDeclarations": [
                            {"name": "f", "parameters": {"type": "object", "additionalProperties": False}}
                        ]
                    }
                ],
            },
            'Unknown name "additionalProperties"',
        ),
        (
            {
                "contents": USER,
                "tools": [{"functionDeclarations": [{"name": "f"}]}],
                "toolConfig": {"functionCallingConfig": {"mode": "AUTO", "allowedFunctionNames": ["f"]}},
            },
            "only allowed when the mode is ANY",
        ),
    ],
)
def test_refuses_what_google_refuses(api, body, needle) -> None:
    r = generate(api, body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and error["code"] == 400 and needle in error["message"]


def test_auth_and_models(fake, api) -> None:
    r = httpx.post(f"{fake.url}/v1beta/models/{MODEL}:generateContent", json={"contents": USER})
    assert r.status_code == 403 and r.json()["error"]["status"] == "PERMISSION_DENIED"
    r = httpx.post(f"{fake.url}/v1beta/models/{MODEL}:generateContent?key={FAKE_API_KEY}", json={"contents": USER})
    assert r.status_code == 400
    r = generate(api, {"contents": USER}, model="gemini-0")
    assert r.status_code == 404 and r.json()["error"]["status"] == "NOT_FOUND"
    r = generate(api, {"content": {"parts": [{"text": "x"}]}}, "embedContent")  # a chat model does not embed
    assert r.status_code == 404
    r = api.get("/models", params={"pageSize": 1})
    assert r.json()["nextPageToken"] == "1" and len(r.json()["models"]) == 1
    assert api.get("/models", params={"pageToken": "1"}).json()["models"][0]["name"] == "models/gemini-embedding-001"
