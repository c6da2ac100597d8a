module github.com/metrale/gpurt

go 1.25.0

require (
	github.com/ebitengine/purego v0.11.3
	github.com/hashicorp/go-hclog v1.6.3
	github.com/stretchr/testify v1.12.1
	golang.org/x/sys v0.47.0
)

require (
	github.com/fatih/color v1.13.0 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.22 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
