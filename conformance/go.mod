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
	github.com/go-openapi/jsonpointer v0.22.5 // indirect
	github.com/go-openapi/swag/jsonname v0.25.5 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/gorilla/mux v1.8.0 // indirect
	github.com/oapi-codegen/runtime v1.9.0 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	go.yaml.in/yaml/v4 v4.0.0 // indirect
	golang.org/x/text v0.14.0 // indirect
)

replace (
	github.com/lanesmq/lanes/sdk-go => ../sdk-go
	github.com/lanesmq/lanes/server => ../server
)
