module github.com/lanesmq/lanes/sdk-go

go 1.26
