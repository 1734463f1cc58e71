package host

import (
	"strings"
	"testing"
)

func TestParseCgroupStat(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     CgroupStat
		wantErr  string
	}{
		{"kernel 6.1", "nr_descendants 12\nnr_dying_descendants 340\n", CgroupStat{12, 340}, ""},
		{"newer keys skipped", "nr_descendants 3\nnr_subsys_memory 4\nnr_dying_descendants 0\nnr_dying_subsys_memory 9\n", CgroupStat{3, 0}, ""},
		{"missing dying", "nr_descendants 3\n", CgroupStat{}, "want nr_descendants and nr_dying_descendants"},
		{"not a count", "nr_descendants 3\nnr_dying_descendants x\n", CgroupStat{}, `nr_dying_descendants "x" is not a count`},
		{"negative", "nr_descendants -1\nnr_dying_descendants 0\n", CgroupStat{}, `nr_descendants "-1" is not a count`},
		{"empty", "", CgroupStat{}, "want nr_descendants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCgroupStat(strings.NewReader(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseCgroupStat error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseCgroupStat = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestStat(t *testing.T) {
	fs := fakeTree(t, "pod", map[string]string{FileStat: "nr_descendants 2\nnr_dying_descendants 7\n"})
	got, err := fs.Stat("/pod")
	if err != nil || got != (CgroupStat{2, 7}) {
		t.Fatalf("Stat = %+v, %v; want {2 7}", got, err)
	}
	if _, err := fs.Stat("/gone"); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("Stat of a missing cgroup = %v, want an error naming it", err)
	}
}
