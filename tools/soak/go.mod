module github.com/lanesmq/lanes/tools/soak

go 1.26.0

require (
	github.com/lanesmq/lanes/sdk-go v0.0.0
	github.com/lanesmq/lanes/server v0.0.0
)

require (
	github.com/apapsch/go-jsonmerge/v2 v2.0.0 // indirect
	github.com/goccy/go-json v0.12.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/hashicorp/go-cleanhttp v0.5.2 // indirect
	github.com/hashicorp/go-retryablehttp v0.7.8 // indirect
	github.com/oapi-codegen/runtime v1.9.0 // indirect
)

replace (
	github.com/lanesmq/lanes/sdk-go => ../../sdk-go
	github.com/lanesmq/lanes/server => ../../server
)
