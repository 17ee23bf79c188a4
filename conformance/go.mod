module github.com/lanesmq/lanes/conformance

go 1.26.0

require (
	github.com/getkin/kin-openapi v0.153.0
	github.com/lanesmq/lanes/sdk-go v0.0.0
	github.com/lanesmq/lanes/server v0.0.0
	go.yaml.in/yaml/v3 v3.0.5
)

require (
	github.com/apapsch/go-jsonmerge/v2 v2.0.0 // indirect
	github.com/go-openapi/jsonpointer v1.0.0 // indirect
	github.com/goccy/go-json v0.12.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/mux v1.8.1 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/hashicorp/go-retryablehttp v0.7.8 // indirect
	github.com/oapi-codegen/runtime v1.9.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	go.yaml.in/yaml/v4 v4.0.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace (
	github.com/lanesmq/lanes/sdk-go => ../sdk-go
	github.com/lanesmq/lanes/server => ../server
)
