// Package msgtypes is the registry of ALP message types: the built-ins of
// spec/types and the namespaced types organizations register. Ingress
// validates bodies at the door with it, policy validates again and decides
// field by field from its classifications, and the REST, MCP and
// federation surfaces name the same types; so it lives in internal/, and
// its rules are the public ones of spec/types/README.md.
//
// # Registration
//
// [Registry.Register] refuses a schema unless every value a body can carry
// is classified (x-alp-class on every property, array item and map value,
// through $defs, oneOf branches and nested objects), free text is capped
// (x-alp-freetext needs a string with maxLength ≤ 280), every reference
// stays inside the document and no keyword is unknown. Each refusal is a
// *[RegistrationError] with a [Code] and a JSON pointer into the schema,
// and leaves the registry as it was. The checks run on the schema's JSON
// before the JSON Schema compiler (santhosh-tekuri/jsonschema v6) sees it,
// in sorted key order, and nothing reads a clock or a random source: a
// projection that replays registration events in order on every replica
// builds the same registry and logs the same refusals.
//
// # Bodies
//
// [Type.Validate] reports every failing keyword with the JSON pointer into
// the body ([ValidationErrors]); a 422 at the door is built from it.
// [Type.Fields] lists every leaf present in a body with its pointer, its
// class (the strictest on its path) and its free-text flag: for a oneOf it
// follows the branch the value matches, for $ref the target, for arrays
// each item. [Type.Check] does both with one decode. [Type.Commits] says
// what a message of the type commits the person receiving it to.
package msgtypes
