// SPDX-License-Identifier: Apache-2.0
//
// Package llm (the Llama-style decoder and its Hugging Face loader) is a
// module of its own so that its safetensors parser stays out of the module
// graph of programs that use gpurt without importing llm. Inside this
// repository it builds against the checkout beside it (the replaces
// below); a release tags both vX.Y.Z and llm/vX.Y.Z and sets the require
// of github.com/metrale/gpurt to vX.Y.Z.
module github.com/metrale/gpurt/llm

go 1.25.0

require (
	github.com/metrale/gpurt v0.0.0-00010101000000-000000000000
	github.com/metrale/gpurt/internal/tinyckpt v0.0.0-00010101000000-000000000000
	github.com/nlpodyssey/safetensors v0.0.0-20250209183917-bfb01cc25f7c
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.47.0
)

require (
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace (
	github.com/metrale/gpurt => ../
	github.com/metrale/gpurt/internal/tinyckpt => ../internal/tinyckpt
)
