// SPDX-License-Identifier: Apache-2.0
//
// The examples (examples/llama, examples/decoderbench) are a module of
// their own: what they alone need (the llm module, a progress bar, the
// terminal check) stays out of gpurt's module graph. They build against
// this checkout (the replaces below): from the repository root,
// go -C examples run ./llama ..., or cd examples first.
module github.com/metrale/gpurt/examples

go 1.25.0

require (
	github.com/metrale/gpurt v0.0.0-00010101000000-000000000000
	github.com/metrale/gpurt/internal/tinyckpt v0.0.0-00010101000000-000000000000
	github.com/metrale/gpurt/llm v0.0.0-00010101000000-000000000000
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/stretchr/testify v1.12.1
	golang.org/x/term v0.44.0
)

require (
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/nlpodyssey/safetensors v0.0.0-20250209183917-bfb01cc25f7c // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace (
	github.com/metrale/gpurt => ../
	github.com/metrale/gpurt/internal/tinyckpt => ../internal/tinyckpt
	github.com/metrale/gpurt/llm => ../llm
)
