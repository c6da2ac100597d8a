// SPDX-License-Identifier: Apache-2.0
//
// Package metrics is a module of its own so that the Prometheus client and
// its dependencies stay out of the module graph of programs that use gpurt
// without importing metrics. Inside this repository it builds against the
// checkout beside it (the replace below); a release tags both vX.Y.Z and
// metrics/vX.Y.Z and sets the require below to vX.Y.Z.
module github.com/metrale/gpurt/metrics

go 1.26.0

require (
	github.com/metrale/gpurt v0.0.0-00010101000000-000000000000
	github.com/prometheus/client_golang v1.25.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/metrale/gpurt => ../
