// SPDX-License-Identifier: Apache-2.0
//
// tinyckpt writes tiny Hugging Face checkpoints for the tests of llm and
// examples/llama; a module of its own so that the safetensors writer it
// uses stays out of the main module's requirements. Never published: only
// the tests of this repository's modules import it (through a replace).
module github.com/metrale/gpurt/internal/tinyckpt

go 1.25.0

require (
	github.com/metrale/gpurt v0.0.0-00010101000000-000000000000
	github.com/nlpodyssey/safetensors v0.0.0-20250209183917-bfb01cc25f7c
)

replace github.com/metrale/gpurt => ../../
