package databases

import (
	"io"
	"strings"
	"testing"
)

func TestStagingFilterKeepsOnlyTablesAndRows(t *testing.T) {
	rename := map[string]string{"rs_pipeline": stagingName("rs_pipeline")}
	var out strings.Builder
	if _, err := io.Copy(&out, newStagingReader(iotestOneByte(mysqlDump+"/*!50001 CREATE VIEW `recent` AS SELECT 1 AS `id` */;\n"+
		"DELIMITER ;;\n/*!50106 CREATE*/ /*!50117 DEFINER=`root`@`localhost`*/ /*!50106 EVENT `nightly` ON SCHEDULE EVERY 1 DAY DO DELETE FROM rs_katib.notes */ ;;\nDELIMITER ;\n"+
		"SET @@GLOBAL.GTID_PURGED='x';\n"), rename)); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"CREATE DATABASE `" + stagingName("rs_pipeline") + "`;\n",
		"USE `" + stagingName("rs_pipeline") + "`;\n",
		"DROP TABLE IF EXISTS `events`;\n",
		"CREATE TABLE `events` (\n",
		"INSERT INTO `events` VALUES (1,'it''s; -- not a comment'),(2,'back\\'slash; \\\\'),(3,\"dq;\");\n",
		"INSERT INTO `events` VALUES (4,0x" + strings.Repeat("00FF", 300) + ");\n",
		"/*!40101 SET NAMES utf8mb4 */;\n",
		// After mysqldump's header and MariaDB's sandbox command, which the scanner counts in it.
		"/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the staged SQL lacks %.80q", want)
		}
	}
	for _, gone := range []string{"rs_pipeline`", "TRIGGER", "VIEW", "EVENT", "DELIMITER", "GLOBAL", "sandbox", "\n--"} {
		if strings.Contains(got, gone) {
			t.Errorf("the staged SQL holds %q:\n%s", gone, got)
		}
	}
	if len(stagingName(strings.Repeat("x", 64))) > 64 {
		t.Error("a staging schema's name is longer than MySQL allows")
	}
}

func TestStagingFilterRefuses(t *testing.T) {
	for name, sql := range map[string]string{
		"another schema's table": "USE `a`;\nINSERT INTO `b`.`t` VALUES (1);\n",
		"a schema not listed":    "USE `other`;\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := io.Copy(io.Discard, newStagingReader(strings.NewReader(sql), map[string]string{"a": "s_a"}))
			if err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// TestStagingFilterKeepsHistorySetting: a MariaDB dump of a system-versioned table's history sets
// system_versioning_insert_history in a MariaDB-only comment; staging keeps it, or the history's
// rows would not load.
func TestStagingFilterKeepsHistorySetting(t *testing.T) {
	set := "/*M!101100 SET @old_system_versioning_insert_history=@@session.system_versioning_insert_history, @@session.system_versioning_insert_history=1 */;"
	sql := "USE `a`;\n" + set + "\nINSERT INTO `prices` (`id`, row_start, row_end) VALUES (1,'2026-01-01 00:00:00.000000','2026-01-02 00:00:00.000000');\n" +
		"DROP SEQUENCE IF EXISTS `ids`;\nCREATE SEQUENCE `ids` start with 1 minvalue 1 maxvalue 9 increment by 1 cache 1000 nocycle ENGINE=InnoDB;\nDO SETVAL(`ids`, 1000, 0);\n"
	var out strings.Builder
	if _, err := io.Copy(&out, newStagingReader(strings.NewReader(sql), map[string]string{"a": "s_a"})); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, set) || !strings.Contains(got, "INSERT INTO `prices`") || strings.Contains(got, "SEQUENCE") || strings.Contains(got, "SETVAL") {
		t.Fatalf("staged:\n%s", got)
	}
}
