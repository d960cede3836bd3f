//! Throwaway PostgreSQL servers for tests of the database store: each [`TestPostgres`] is a
//! cluster of its own (`initdb` in a temporary folder, `pg_ctl` on a free loopback port, trust
//! authentication), stopped and deleted when dropped.
//!
//! The binaries come from `CODEMODE_TEST_PG_BIN` if set, else the newest
//! `/usr/lib/postgresql/*/bin` (Debian's packages), else `PATH`. As root (PostgreSQL refuses to
//! run as root) the cluster runs as the `postgres` user, through `runuser`.
//!
//! Without PostgreSQL a test is left out, and says so on stderr; `.ci/run` sets
//! `CODEMODE_TEST_POSTGRES=required`, under which a missing PostgreSQL fails the test instead.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

/// The database user the clusters are made for.
pub const USER: &str = "codemode";

/// A PostgreSQL cluster of one test.
#[derive(Debug)]
pub struct TestPostgres {
    bin: PathBuf,
    folder: PathBuf,
    port: u16,
    run_as: Option<String>,
    /// Whether the server syncs its writes to disk (off for tests: nothing here must survive a
    /// power cut, and syncs would only slow them).
    durable: bool,
}

impl TestPostgres {
    /// Starts a new cluster that does not sync to disk; `None` (after saying on stderr that
    /// `test` is left out, and why) when this machine has no PostgreSQL, unless
    /// `CODEMODE_TEST_POSTGRES=required`.
    pub fn start(test: &str) -> Option<TestPostgres> {
        TestPostgres::start_with(test, false)
    }

    /// [`TestPostgres::start`], syncing to disk as a production server does (for benchmarks).
    pub fn start_durable(test: &str) -> Option<TestPostgres> {
        TestPostgres::start_with(test, true)
    }

    fn start_with(test: &str, durable: bool) -> Option<TestPostgres> {
        let bin = match find_binaries() {
            Ok(bin) => bin,
            Err(why) => {
                if std::env::var("CODEMODE_TEST_POSTGRES").as_deref() == Ok("required") {
                    panic!("{test} needs PostgreSQL (CODEMODE_TEST_POSTGRES=required): {why}");
                }
                eprintln!(
                    "left out: {test} needs a PostgreSQL server, and {why}. Install Debian's \
                     postgresql package (or set CODEMODE_TEST_PG_BIN) to run it"
                );
                return None;
            }
        };
        let run_as = is_root().then(|| "postgres".to_owned());
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let folder =
            std::env::temp_dir().join(format!("codemode-pg-{}-{stamp}", std::process::id()));
        std::fs::create_dir_all(&folder).expect("a temporary folder for the cluster");
        if let Some(user) = &run_as {
            hand_over(&folder, user);
        }
        let cluster = TestPostgres {
            bin,
            folder,
            port: free_port(),
            run_as,
            durable,
        };
        let initdb = cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data().display().to_string(),
                "-U",
                USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        assert!(initdb.status.success(), "initdb failed: {}", text(&initdb));
        cluster.start_server();
        Some(cluster)
    }

    /// The URL of database `postgres` on this cluster.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server at once (`immediate`: as a crash would), keeping its data.
    pub fn stop(&self) {
        let stopped = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
        assert!(
            stopped.status.success(),
            "pg_ctl stop failed: {}",
            text(&stopped)
        );
    }

    /// Starts the server again on the same port, with the same data.
    pub fn start_server(&self) {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.folder.display()
        );
        if !self.durable {
            options.push_str(" -c fsync=off -c full_page_writes=off");
        }
        let log = self.folder.join("server.log").display().to_string();
        let started = self.pg_ctl(&["start", "-w", "-t", "60", "-o", &options, "-l", &log]);
        assert!(
            started.status.success(),
            "pg_ctl start failed: {}\n{}",
            text(&started),
            self.log()
        );
    }

    /// What the server has logged so far (the errors it answered with, among others).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.folder.join("server.log")).unwrap_or_default()
    }

    /// Runs `sql` with `psql` on database `postgres`; its output (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> String {
        let output = self
            .psql_command()
            .args(["-A", "-t", "-c", sql])
            .output()
            .unwrap_or_else(|error| panic!("cannot run psql: {error}"));
        assert!(output.status.success(), "psql failed: {}", text(&output));
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Waits (within the hang guard) until `sql` answers `expected`: for what a server writes a
    /// moment later, or a lock another session takes.
    pub async fn wait_for(&self, what: &str, sql: &str, expected: &str) {
        crate::within(what, async {
            while self.psql(sql) != expected {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
    }

    /// Runs `sql` in a `psql` session that stays open (a transaction that holds its locks, say)
    /// until the returned child is dropped or its standard input closed.
    pub fn hold(&self, sql: &str) -> HeldSession {
        use std::io::Write;
        let mut child = self
            .psql_command()
            .arg("-q")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot run psql: {error}"));
        let stdin = child.stdin.as_mut().expect("psql's standard input");
        writeln!(stdin, "{sql}").expect("psql takes the statement");
        stdin.flush().expect("psql takes the statement");
        HeldSession(child)
    }

    /// `psql` connected to database `postgres`, stopping at the first error.
    fn psql_command(&self) -> Command {
        let mut command = self.command("psql");
        command.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER]);
        command.args(["-d", "postgres", "-X", "-v", "ON_ERROR_STOP=1"]);
        command
    }

    fn data(&self) -> PathBuf {
        self.folder.join("data")
    }

    fn pg_ctl(&self, arguments: &[&str]) -> Output {
        let data = self.data().display().to_string();
        let mut all = vec!["-D", data.as_str()];
        all.extend_from_slice(arguments);
        self.run("pg_ctl", &all)
    }

    fn run(&self, program: &str, arguments: &[&str]) -> Output {
        self.command(program)
            .args(arguments)
            .output()
            .unwrap_or_else(|error| panic!("cannot run {program}: {error}"))
    }

    /// `program` of the cluster's binaries, run as the cluster's user, in its folder.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(&program);
                command
            }
            None => Command::new(&program),
        };
        command.current_dir(&self.folder);
        command
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
        let _ = std::fs::remove_dir_all(&self.folder);
    }
}

/// A `psql` session left open by [`TestPostgres::hold`]; dropping it ends the session.
#[derive(Debug)]
pub struct HeldSession(std::process::Child);

impl Drop for HeldSession {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where `initdb`, `pg_ctl` and `psql` are.
fn find_binaries() -> Result<PathBuf, String> {
    let has_all = |folder: &Path| {
        ["initdb", "pg_ctl", "psql", "postgres"]
            .iter()
            .all(|program| folder.join(program).is_file())
    };
    if let Some(folder) = std::env::var_os("CODEMODE_TEST_PG_BIN") {
        let folder = PathBuf::from(folder);
        return if has_all(&folder) {
            Ok(folder)
        } else {
            Err(format!(
                "CODEMODE_TEST_PG_BIN ({}) lacks initdb, pg_ctl, psql or postgres",
                folder.display()
            ))
        };
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_all(bin))
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|folder| has_all(folder))
        .ok_or_else(|| {
            "no initdb, pg_ctl, psql and postgres were found (in /usr/lib/postgresql/*/bin or on \
             PATH)"
                .to_owned()
        })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}

/// Gives `folder` to `user`, who runs the cluster.
fn hand_over(folder: &Path, user: &str) {
    let owner = Command::new("chown")
        .arg(user)
        .arg(folder)
        .output()
        .expect("chown runs");
    assert!(
        owner.status.success(),
        "cannot give the cluster's folder to {user}: {}",
        text(&owner)
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
