module github.com/lanesmq/lanes/bench

go 1.26
