package main

import "testing"

func TestPerfLinesKeepsNamedSamplesAndDropsCommentsAndAddresses(t *testing.T) {
	report := `# Samples: 7K of event 'cpu-clock:ppp'
#
    36.41%     0.33%  postgres           [.] PostgresMain
    25.04%     0.00%  postgres           [.] 0x0000563a80fef021

     9.62%     0.01%  postgres           [.] standard_ExecutorStart
     2.65%     0.01%  postgres           [.] EvalPlanQualBegin
`
	got := perfLines(report, 2)
	want := "    36.41%     0.33%  postgres           [.] PostgresMain\n" +
		"     9.62%     0.01%  postgres           [.] standard_ExecutorStart\n"
	if got != want {
		t.Fatalf("perfLines kept\n%q\nwant\n%q", got, want)
	}
}
