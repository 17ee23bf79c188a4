package main

import (
	"os"
	"testing"

	"github.com/lanesmq/lanes/server/internal/brokertest"
)

// TestMain removes the broker binary the process-level tests share.
func TestMain(m *testing.M) { os.Exit(brokertest.Main(m)) }
