/*
 * bench_reader: a bare log reader on the binlog server, as a replica or
 * Debezium attaches one, so that the cost bench can set what the relay
 * costs the primary beside what reading its binary log alone costs it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mysql.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* mariadb-binlog writes the events it reads here, raw: decoding them to
 * SQL would spend the shared cores' CPU that mariadbd is measured on.
 * Each reader starts at the binlog's end and overwrites its file. */
#define READER_PREFIX "/tmp/outboxd-bench-reader-"
#define READER_LOG "/tmp/outboxd-bench-reader.log"
/* A replica's server id of its own: a second stream with the id of
 * another would end the other's (outboxd's is random, from 2^31). */
#define READER_SERVER_ID "4242"
#define READER_ATTACH_S 10.0

/* The binlog's current file and position, as SHOW MASTER STATUS says. */
static void
binlog_end(MYSQL *m, char *file, size_t filelen, char *pos, size_t poslen)
{
    if (mysql_query(m, "SHOW MASTER STATUS") != 0)
        die("SHOW MASTER STATUS: %s", mysql_error(m));
    MYSQL_RES *r = mysql_store_result(m);
    MYSQL_ROW row = r != NULL ? mysql_fetch_row(r) : NULL;
    if (row == NULL || row[0] == NULL || row[1] == NULL)
        die("SHOW MASTER STATUS answered no binlog");
    snprintf(file, filelen, "%s", row[0]);
    snprintf(pos, poslen, "%s", row[1]);
    mysql_free_result(r);
}

static long long
reader_dumps(MYSQL *m)
{
    return db_int(m, "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                     "WHERE COMMAND LIKE 'Binlog Dump%' AND USER = 'outboxd'");
}

static void
reader_exec(const struct server *sv, const char *file, const char *pos)
{
    char port[16], start[64];
    int fd = open(READER_LOG, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
    }
    snprintf(port, sizeof(port), "--port=%d", sv->port);
    snprintf(start, sizeof(start), "--start-position=%s", pos);
    execlp("mariadb-binlog", "mariadb-binlog", "--read-from-remote-server",
           "--raw", "--stop-never",
           "--stop-never-slave-server-id=" READER_SERVER_ID, "--host=127.0.0.1",
           port, "--user=outboxd", "--password=outboxd", start,
           "--result-file=" READER_PREFIX, file, (char *)NULL);
    _exit(127);
}

/* A reader streaming sv's binlog from its end; returns once the server
 * shows its dump thread. */
pid_t
log_reader_start(const struct server *sv)
{
    char file[256], pos[32];
    MYSQL *m = db_connect(sv, NULL);
    binlog_end(m, file, sizeof(file), pos, sizeof(pos));
    long long before = reader_dumps(m);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0)
        reader_exec(sv, file, pos);
    for (double t0 = now_s(); reader_dumps(m) <= before; sleep_s(0.05)) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            die("mariadb-binlog exited before streaming (see " READER_LOG ")");
        if (now_s() - t0 > READER_ATTACH_S)
            die("mariadb-binlog did not attach in %.0f s (see " READER_LOG ")",
                READER_ATTACH_S);
    }
    mysql_close(m);
    return pid;
}

void
log_reader_stop(pid_t pid)
{
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}
