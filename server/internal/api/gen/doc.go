// Package gen holds code generated from openapi.yaml; do not edit.
//
// Regenerate with `make generate` at the repository root. The generator is
// oapi-codegen, pinned in tools/go.mod; its settings are in oapi-codegen.yaml.
package gen
