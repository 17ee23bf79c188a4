module github.com/lanesmq/lanes/conformance

go 1.26
