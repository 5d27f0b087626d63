"""`aw-mcp import openapi`: documents written for these tests (3.0 YAML, 3.1 JSON, the README example) become
worlds that validate and serve through the real server, array roots wrapped on the way out."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client, StdioServerParameters

from aw_mcp.cli import main
from aw_mcp.importers.import_log import ImportLog
from aw_mcp.importers.openapi_schema import OpenAPIDocument
from aw_mcp.load.world import load_world, validate_paths
from aw_mcp.protocol.server import WorldApp, build_server
from aw_mcp.sim.simulator import Simulator
from aw_mcp.spec.world import WorldSpec
from tests.conftest import REPO, ScriptedWorldModel, observation
from tests.fake_openai import Reply, ScriptedOpenAIServer

PETSTORE_30 = """\
openapi: 3.0.3
info: {title: Pet Store, version: "1.2", description: Pets for adoption.}
servers: [{url: "https://petstore.example.com/v1", description: live}]
tags: [{name: pets, description: Every pet has exactly one category.}]
paths:
  /pets:
    get:
      operationId: listPets
      summary: List pets
      tags: [pets]
      parameters:
        - {name: limit, in: query, schema: {type: integer, minimum: 0, exclusiveMinimum: true}, example: 2}
        - {name: X-Request-Id, in: header, schema: {type: string}}
        - {name: session, in: cookie, schema: {type: string}}
      responses:
        "200":
          description: A page of pets.
          content:
            application/json:
              schema: {type: array, items: {$ref: "#/components/schemas/Pet"}}
              example: [{id: 1, name: Rex, tag: null, category: {id: 3, name: dogs}}]
        "500": {description: Server failure}
    post:
      operationId: createPet
      summary: Create a pet
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/NewPet"}
            examples:
              cat: {value: {name: Tom, tag: cat}}
      responses:
        "201":
          description: Created
          content:
            application/json:
              schema: {$ref: "#/components/schemas/Pet"}
              examples:
                cat: {value: {id: 2, name: Tom, tag: cat}}
                broken: {value: {name: no id}}
        "409":
          description: Name taken
          content:
            application/json:
              example: {message: A pet with this name exists}
  /pets/{petId}:
    parameters:
      - {name: petId, in: path, required: true, schema: {type: integer}}
    get:
      summary: Get a pet
      responses:
        "200":
          description: The pet.
          content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}
        "404": {$ref: "#/components/responses/NotFound"}
    delete:
      operationId: deletePet
      responses: {"204": {description: Deleted}, "404": {$ref: "#/components/responses/NotFound"}}
    put:
      operationId: listPets
      requestBody:
        content:
          application/x-www-form-urlencoded:
            schema:
              type: object
              properties: {name: {type: string}, status: {type: string, enum: [available, sold]}}
      responses: {"200": {description: Updated}}
  /pets/{petId}/photo:
    post:
      operationId: upload photo!
      parameters: [{name: petId, in: path, required: true, schema: {type: integer}, example: 7}]
      requestBody:
        required: true
        content:
          multipart/form-data:
            example: {file: "<png bytes>", caption: Rex asleep}
            schema:
              type: object
              required: [file]
              properties: {file: {type: string, format: binary}, caption: {type: string}}
      responses:
        "200": {description: Stored, content: {text/plain: {schema: {type: string}, example: stored}}}
  /categories/{id}:
    get:
      operationId: getCategory
      parameters:
        - {name: id, in: path, required: true, schema: {type: integer}}
        - {name: id, in: header, schema: {type: string}}
        - {name: depth, in: query, schema: {$ref: "shared.yaml#/Depth"}}
      responses:
        "200":
          description: A category tree.
          content: {application/json: {schema: {$ref: "#/components/schemas/Category"}}}
  /export:
    post:
      operationId: exportPets
      requestBody: {content: {application/xml: {schema: {type: string}}}}
      responses: {"200": {description: XML dump, content: {application/xml: {schema: {type: string}}}}}
components:
  responses:
    NotFound:
      description: Pet not found
      content: {application/json: {schema: {$ref: "#/components/schemas/Error"}}}
  schemas:
    NewPet:
      type: object
      required: [name]
      properties:
        id: {type: integer, readOnly: true}
        name: {type: string, example: Rex}
        tag: {type: string, nullable: true}
        secret: {type: string, writeOnly: true}
    Pet:
      allOf:
        - $ref: "#/components/schemas/NewPet"
        - type: object
          required: [id]
          properties:
            id: {type: integer}
            category: {$ref: "#/components/schemas/Category"}
      discriminator: {propertyName: tag}
      xml: {name: pet}
      externalDocs: {url: "https://example.com"}
    Category:
      type: object
      required: [id, name]
      properties:
        id: {type: integer}
        name: {type: string}
        parent: {$ref: "#/components/schemas/Category"}
        children: {type: array, items: {$ref: "#/components/schemas/Category"}}
    Error:
      type: object
      properties: {message: {type: string}}
"""

ORDERS_31 = {
    "openapi": "3.1.0",
    "info": {"title": "Orders", "version": "2"},
    "paths": {
        "/orders": {
            "post": {
                "operationId": "placeOrder",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "oneOf": [
                                    {"$ref": "#/components/schemas/CardPayment"},
                                    {"$ref": "#/components/schemas/InvoicePayment"},
                                ]
                            }
                        }
                    },
                },
                "responses": {
                    "201": {
                        "description": "The order, or null when it was merged into another.",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": ["object", "null"],
                                    "properties": {"id": {"type": "string"}},
                                }
                            }
                        },
                    }
                },
            }
        },
        "/orders/{id}/status": {
            "get": {
                "parameters": [
                    {
                        "name": "id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                        "example": "o1",
                    }
                ],
                "responses": {
                    "200": {
                        "description": "ok",
                        "content": {
                            "application/json": {
                                "schema": {"type": "string", "enum": ["open", "paid"], "examples": ["open"]}
                            }
                        },
                    }
                },
            }
        },
        "/orders/{id}": {
            "get": {
                "operationId": "getOrder",
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    "200": {
                        "description": "ok",
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/Order", "description": "One order."}
                            }
                        },
                    }
                },
            }
        },
    },
    "webhooks": {"orderPaid": {"post": {"responses": {"200": {"description": "ok"}}}}},
    "components": {
        "schemas": {
            "CardPayment": {
                "type": "object",
                "required": ["card"],
                "properties": {"card": {"type": "string"}, "kind": {"const": "card"}},
            },
            "InvoicePayment": {
                "type": "object",
                "required": ["iban"],
                "properties": {"iban": {"type": "string"}, "kind": {"const": "invoice"}},
            },
            "Order": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "total": {"type": ["number", "null"]}},
            },
        }
    },
}


def run_import(
    tmp_path: Path, source: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[WorldSpec, str, Path]:
    out = tmp_path / "worlds" / f"{source.stem}.yaml"
    assert main(["import", "openapi", str(source), "-o", str(out)]) == 0
    stderr = capsys.readouterr().err
    assert validate_paths([out]) == []
    return load_world(out), stderr, out


def walk_keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in walk_keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in walk_keys(v)}
    return set()


@pytest.fixture
def petstore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[WorldSpec, str, Path]:
    source = tmp_path / "petstore.yaml"
    source.write_text(PETSTORE_30)
    return run_import(tmp_path, source, capsys)


def test_openapi_30_tools_names_annotations_and_warnings(petstore: tuple[WorldSpec, str, Path]) -> None:
    world, stderr, _ = petstore
    names = [t.name for t in world.tools]
    assert names == [
        "listPets",
        "createPet",
        "get_pets_petId",
        "listPets_2",
        "deletePet",
        "upload_photo",
        "getCategory",
        "exportPets",
    ]
    assert world.name == "pet-store" and "Pets for adoption." in world.description
    assert "The API is served at https://petstore.example.com/v1 (live)." in [f.text for f in world.facts]
    tag_fact = next(f for f in world.facts if f.text.startswith("pets:"))
    assert tag_fact.tools == ["listPets"]
    hints = {t.name: t.annotations for t in world.tools}
    assert hints["listPets"].readOnlyHint is True
    assert hints["deletePet"].destructiveHint is True and hints["deletePet"].idempotentHint is True
    assert hints["listPets_2"].idempotentHint is True and hints["createPet"].readOnlyHint is False
    # Unsupported constructs: warned with the JSON pointer, never fatal.
    for expected in (
        "#/paths/~1pets/get/parameters/2: cookie parameters are not supported",
        "#/paths/~1pets~1{petId}/put: tool name 'listPets' is taken",
        "#/paths/~1pets~1{petId}~1photo/post: operationId 'upload photo!' is not a valid tool name",
        "#/paths/~1categories~1{id}/get/parameters/1: parameter name 'id' is used twice",
        "external $ref 'shared.yaml#/Depth' is not supported",
        "#/paths/~1pets/post: example 2 skipped",
        "request body type 'application/xml' is not JSON or a form",
    ):
        assert expected in stderr, expected
    assert "Traceback" not in stderr


def test_openapi_30_schemas_merged_and_converted(petstore: tuple[WorldSpec, str, Path]) -> None:
    world, _, _ = petstore
    tools = {t.name: t for t in world.tools}
    listing = tools["listPets"].inputSchema
    assert set(listing["properties"]) == {"limit", "X-Request-Id"}  # the cookie is gone
    assert listing["properties"]["limit"] == {"type": "integer", "exclusiveMinimum": 0}
    assert listing["additionalProperties"] is False
    create = tools["createPet"].inputSchema
    assert set(create["properties"]) == {"name", "tag", "secret"}  # readOnly id left out of the request
    assert create["required"] == ["name"]
    assert create["properties"]["tag"]["type"] == ["string", "null"]  # 3.0 nullable
    assert create["properties"]["name"]["examples"] == ["Rex"]  # 3.0 example
    pet = tools["get_pets_petId"]
    assert pet.inputSchema["required"] == ["petId"] and pet.outputWrapper is None
    assert {"discriminator", "xml", "externalDocs", "nullable", "example"}.isdisjoint(
        walk_keys(pet.outputSchema)
    )
    assert "secret" not in json.dumps(pet.outputSchema)  # writeOnly stays out of responses
    assert [(e.name, e.status, e.message) for e in pet.errors] == [("pet_not_found", 404, "Pet not found")]
    # Array root: wrapped under `items`, the example kept raw (the simulator wraps it).
    listed = tools["listPets"]
    assert listed.outputWrapper == "items" and listed.outputSchema["required"] == ["items"]
    assert listed.examples[0].arguments == {"limit": 2}
    assert listed.examples[0].result[0]["name"] == "Rex"
    assert [(e.status, e.message) for e in listed.errors] == [(500, "Server failure")]
    # Named request and response examples pair up; the one that does not validate was skipped.
    assert [e.model_dump() for e in tools["createPet"].examples] == [
        {"arguments": {"name": "Tom", "tag": "cat"}, "result": {"id": 2, "name": "Tom", "tag": "cat"}}
    ]
    assert tools["createPet"].errors[0].message == "A pet with this name exists"
    # Form bodies: urlencoded and multipart fields become arguments next to the path parameter.
    assert set(tools["listPets_2"].inputSchema["properties"]) == {"petId", "name", "status"}
    upload = tools["upload_photo"]
    assert upload.inputSchema["required"] == ["petId", "file"] and upload.outputSchema is None
    assert [e.model_dump() for e in upload.examples] == [
        {"arguments": {"petId": 7, "file": "<png bytes>", "caption": "Rex asleep"}, "result": "stored"}
    ]
    category = tools["getCategory"]
    assert set(category.inputSchema["properties"]) == {"id", "header_id", "depth"}
    # A recursive component is one shared definition that refers to itself (no cut, no warning).
    assert category.outputSchema["properties"]["parent"] == {"$ref": "#/$defs/Category"}
    assert category.outputSchema["properties"]["children"]["items"] == {"$ref": "#/$defs/Category"}
    assert category.outputSchema["$defs"]["Category"]["properties"]["parent"] == {"$ref": "#/$defs/Category"}
    assert tools["exportPets"].inputSchema["properties"]["body"]["type"] == "string"


def test_imported_yaml_is_human_ordered(petstore: tuple[WorldSpec, str, Path]) -> None:
    _, _, out = petstore
    text = out.read_text()
    assert text.startswith("# Imported from petstore.yaml")
    data = yaml.safe_load(text)
    assert list(data)[:3] == ["name", "description", "domain"]
    assert list(data["tools"][1]) == [
        "name",
        "title",
        "description",
        "inputSchema",
        "outputSchema",
        "annotations",
        "examples",
        "errors",
    ]
    assert "&id" not in text and "*id" not in text  # no YAML anchors/aliases for shared schemas


def pet_answers(messages: list[dict[str, str]], call: Any) -> str:
    if call.tool == "listPets":
        return observation('[{"id": 1, "name": "Rex", "tag": null}, {"id": 2, "name": "Tom", "tag": "cat"}]')
    if call.tool == "get_pets_petId":
        return observation('{"id": 1, "name": "Rex", "category": {"id": 3, "name": "dogs"}}')
    return observation("Stored.")


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_imported_world_serves_with_wrapped_array_results(
    mode: str, petstore: tuple[WorldSpec, str, Path]
) -> None:
    world, _, out = petstore
    model = ScriptedWorldModel(pet_answers)
    server = build_server(WorldApp(Simulator(world, model), out.read_text()))
    async with Client(server, mode=mode) as client:
        tools = (await client.list_tools()).tools  # the legacy era rejects any non-object output root
        listed = await client.call_tool("listPets", {"limit": 2})
        pet = await client.call_tool("get_pets_petId", {"petId": 1})
        bad = await client.call_tool("get_pets_petId", {"petId": "one"})
    assert len(tools) == len(world.tools)
    assert all(t.output_schema is None or t.output_schema["type"] == "object" for t in tools)
    assert listed.is_error is False
    assert listed.structured_content == {
        "items": [{"id": 1, "name": "Rex", "tag": None}, {"id": 2, "name": "Tom", "tag": "cat"}]
    }
    assert pet.structured_content["category"] == {"id": 3, "name": "dogs"}
    assert bad.is_error and "petId" in bad.content[0].text
    # The demonstrations in the prompt are the imported examples.
    assert "Write the launch post" not in model.calls[0]["messages"][0]["content"]  # another spec's example
    assert '"name": "Rex"' in model.calls[0]["messages"][0]["content"]


def test_openapi_31_json_oneof_type_arrays_and_ref_siblings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "orders.json"
    source.write_text(json.dumps(ORDERS_31))
    world, stderr, _ = run_import(tmp_path, source, capsys)
    tools = {t.name: t for t in world.tools}
    assert list(tools) == ["placeOrder", "get_orders_id_status", "getOrder"]
    place = tools["placeOrder"]
    body = place.inputSchema["properties"]["body"]  # a oneOf body cannot be flattened
    assert place.inputSchema["required"] == ["body"] and len(body["oneOf"]) == 2
    assert body["oneOf"][1] == {"$ref": "#/$defs/InvoicePayment"}  # each component kept once, referred to
    assert place.inputSchema["$defs"]["InvoicePayment"]["properties"]["kind"] == {"const": "invoice"}
    assert place.outputWrapper == "result" and place.outputSchema["properties"]["result"]["type"] == [
        "object",
        "null",
    ]
    status = tools["get_orders_id_status"]
    assert status.outputWrapper == "result"
    # No media example: the schema's own example is the result, the parameter example the argument.
    assert [e.model_dump() for e in status.examples] == [{"arguments": {"id": "o1"}, "result": "open"}]
    order = tools["getOrder"].outputSchema
    assert order["description"] == "One order." and order["properties"]["total"]["type"] == ["number", "null"]
    assert "#/webhooks: webhooks are not imported" in stderr


def test_schema_converter_30_dialect_edge_cases() -> None:
    log = ImportLog()
    document = OpenAPIDocument({"openapi": "3.0.0"}, log)
    assert document.schema({"enum": ["a", "b"], "nullable": True}, "#/x", "request") == {
        "anyOf": [{"enum": ["a", "b", None]}, {"type": "null"}]
    }
    assert document.schema({"type": "number", "maximum": 5, "exclusiveMaximum": False}, "#/x", "request") == {
        "type": "number",
        "maximum": 5,
    }
    assert document.schema({"type": "file", "required": True}, "#/y", "request") == {}
    assert log.warnings == [
        "#/y/type: unknown type ['file'] is not JSON Schema; dropped",
        "#/y/required: `required` must be a list of property names here; dropped",
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("swagger: '2.0'\ninfo: {title: x}\n", "is Swagger 2.0; convert it to OpenAPI 3 first"),
        ("openapi: 3.0.0\ninfo: {title: x, version: '1'}\n", "has no `paths:`"),
        ("- just\n- a list\n", "expected an OpenAPI document"),
        ("openapi: 3.0.0\npaths: {/a: {get: {responses: [}}}\n", "is neither JSON nor YAML"),
    ],
)
def test_unusable_documents_fail_with_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    source = tmp_path / "api.yaml"
    source.write_text(content)
    assert main(["import", "openapi", str(source), "-o", str(tmp_path / "w.yaml")]) == 1
    stderr = capsys.readouterr().err
    assert message in stderr and "Traceback" not in stderr
    assert not (tmp_path / "w.yaml").exists()


def test_existing_output_needs_force(
    tmp_path: Path, petstore: tuple[WorldSpec, str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, out = petstore
    source = tmp_path / "petstore.yaml"
    assert main(["import", "openapi", str(source), "-o", str(out)]) == 1
    assert "pass --force" in capsys.readouterr().err
    assert main(["import", "openapi", str(source), "-o", str(out), "--force", "--name", "pets"]) == 0
    assert load_world(out).name == "pets"


@pytest.mark.anyio
async def test_readme_example_imports_and_serves_over_stdio(tmp_path: Path) -> None:
    """The README walk-through: import docs/examples/tasks-openapi.yaml, serve it, call list_tasks."""
    out = tmp_path / "tasks.yaml"
    assert main(["import", "openapi", str(REPO / "docs/examples/tasks-openapi.yaml"), "-o", str(out)]) == 0
    assert validate_paths([out]) == []

    def answer(body: dict, n: int) -> Reply:
        assert "closed tasks cannot be edited" in body["messages"][0]["content"]
        return Reply(
            content='**Environment Observation:**\n[{"id": "tsk_0042", "title": "Ship it", "status": "open"}]'
        )

    with ScriptedOpenAIServer(answer) as backend:
        args = [
            "-m",
            "aw_mcp",
            "serve",
            "--world",
            str(out),
            "--backend",
            "openai",
            "--base-url",
            backend.base_url,
        ]
        params = StdioServerParameters(command=sys.executable, args=[*args, "--model", "m"], cwd=str(REPO))
        async with Client(params, mode="legacy") as client:
            result = await client.call_tool("list_tasks", {"project": "website", "status": "open"})
    assert result.structured_content == {"items": [{"id": "tsk_0042", "title": "Ship it", "status": "open"}]}


def test_schema_converter_stops_inlining_an_exploding_schema() -> None:
    # Each level references the next twice: 2**12 expansions if fully inlined.
    schemas = {
        f"L{i}": {
            "type": "object",
            "properties": {"a": {"$ref": f"#/S/L{i + 1}"}, "b": {"$ref": f"#/S/L{i + 1}"}},
        }
        for i in range(12)
    }
    schemas["L12"] = {"type": "string"}
    log = ImportLog()
    document = OpenAPIDocument({"openapi": "3.1.0", "S": schemas}, log)
    converted = document.schema({"$ref": "#/S/L0"}, "#/x", "response")
    assert len(json.dumps(converted)) < 200_000
    assert any("schema too large to inline" in w for w in log.warnings)
