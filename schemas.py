"""The tool list made small: the tools' JSON schemas without what no client or agent uses.

Every conversation loads the tool list before its first question, so each character of it is
paid for again and again. The SDK derives the schemas from the tools' signatures and reply types
with pydantic, which adds a ``title`` to every field (its name again, capitalised), writes an
optional value as ``anyOf`` with null, and copies the reply types' docstrings, written for this
code's readers, into the output schemas. What an agent needs stays: each parameter's type, bounds,
default and description; and each field every reply carries, with its type.
"""

from __future__ import annotations

from typing import Any

#: Keywords whose value is a schema, or a list of schemas.
_SUBSCHEMAS = ("items", "additionalProperties", "not", "anyOf", "oneOf", "allOf", "prefixItems")
#: Bounds that bound nothing.
_VACUOUS = {("minLength", 0), ("minItems", 0)}
_NULL = {"type": "null"}


def compact_schema(schema: Any, descriptions: bool = True, required_only: bool = False) -> Any:
    """``schema`` without ``title`` keywords, a ``default`` of null, bounds of 0 on lengths, and
    (unless ``descriptions``) ``description`` keywords. A property that is not required and may be
    null is written as its type alone (leaving it out says what null says); a required one keeps
    null as a type. With ``required_only``, an object lists only the properties it requires (those
    always there; others may still come), with the definitions they use written in place.
    Pure: returns a new schema."""
    compacted = _compact(schema, descriptions, required_only, optional=False)
    if required_only and isinstance(compacted, dict) and "$defs" in compacted:
        definitions = compacted.pop("$defs")
        return _inlined(compacted, definitions)
    return compacted


def _compact(schema: Any, descriptions: bool, required_only: bool, optional: bool) -> Any:
    if not isinstance(schema, dict):
        return schema
    required = set(schema.get("required", ()))
    compacted: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or (key == "default" and value is None) or (key == "description" and not descriptions):
            continue
        if isinstance(value, int) and (key, value) in _VACUOUS:
            continue
        if key == "properties" and isinstance(value, dict):
            kept = {name: sub for name, sub in value.items() if name in required or not required_only}
            compacted[key] = {name: _compact(sub, descriptions, required_only, name not in required) for name, sub in kept.items()}
        elif key == "$defs" and isinstance(value, dict):
            compacted[key] = {name: _compact(sub, descriptions, required_only, False) for name, sub in value.items()}
        elif key in _SUBSCHEMAS:
            compacted[key] = [_compact(sub, descriptions, required_only, False) for sub in value] if isinstance(value, list) \
                else _compact(value, descriptions, required_only, False)
        else:
            compacted[key] = value
    return _without_null(compacted) if optional else _null_as_type(compacted)


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional property's ``{"anyOf": [A, {"type": "null"}], ...}`` as A's keywords beside
    the others (``{"anyOf": [A, B, null]}`` as ``{"anyOf": [A, B]}``)."""
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or _NULL not in branches:
        return schema
    others = [branch for branch in branches if branch != _NULL]
    rest = {key: value for key, value in schema.items() if key != "anyOf"}
    if len(others) != 1 or any(key in rest for key in others[0]):
        return {"anyOf": others, **rest}
    return {**others[0], **rest}


def _null_as_type(schema: dict[str, Any]) -> dict[str, Any]:
    """``{"anyOf": [{"type": T}, {"type": "null"}]}`` as ``{"type": [T, "null"]}``."""
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or len(branches) != 2 or _NULL not in branches:
        return schema
    other = branches[0] if branches[1] == _NULL else branches[1]
    if set(other) != {"type"} or not isinstance(other["type"], str):
        return schema
    return {"type": [other["type"], "null"], **{key: value for key, value in schema.items() if key != "anyOf"}}


def _inlined(schema: Any, definitions: dict[str, Any]) -> Any:
    """``schema`` with each ``{"$ref": "#/$defs/NAME"}`` replaced by that definition (the reply
    types nest without recursion): a reference costs more than the small definitions it names."""
    if isinstance(schema, list):
        return [_inlined(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/$defs/") and reference[8:] in definitions:
        return _inlined(definitions[reference[8:]], definitions)
    return {key: _inlined(value, definitions) for key, value in schema.items()}


#: What the SDK's server answers although it holds none: advertised, they tell a client to look.
_EMPTY_CAPABILITIES = ("prompts/", "resources/")


def advertise_tools_only(server: Any) -> None:
    """Take away the SDK's handlers for prompts and resources, which this server has none of, so
    that its capabilities (what initialize advertises) name only tools."""
    handlers = server._lowlevel_server._request_handlers  # no public way to leave them out
    for method in [method for method in handlers if method.startswith(_EMPTY_CAPABILITIES)]:
        del handlers[method]


def compact_tools(server: Any) -> None:
    """Make an MCPServer's tool list compact, in place: descriptions on one line; the input
    schemas (compact_schema) keep their descriptions; the output schemas declare the fields every
    reply carries (the contract, the spec's fields among them) with their types. The fields a
    reply carries only when they say something are in docs/tools.md."""
    for tool in server._tool_manager.list_tools():  # the SDK keeps no public way to set them
        tool.description = " ".join((tool.description or "").split())  # a docstring's indentation
        tool.parameters = compact_schema(tool.parameters)
        tool.fn_metadata.output_schema = compact_schema(tool.fn_metadata.output_schema, descriptions=False, required_only=True)
        tool.__dict__.pop("output_schema", None)  # a cached_property that may have read the old one
