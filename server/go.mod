module github.com/lanesmq/lanes/server

go 1.26
