import Foundation
import Testing
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import SendJournal

/// The journal's disk fills mid-send (issue 33, "Done when"): a small tmpfs
/// in a user and mount namespace of its own (`unshare -rm`) holds the
/// journal; the send must end with 74 (EX_IOERR) within its stop bound, and
/// `--resume` once the tmpfs is grown (the same namespace) must deliver
/// every notification, duplicates no more than the journal reports. The
/// simulator runs in the test process, outside the namespace (same network).
struct JournalFullDiskTests {
    /// The wire, and where the plan comes from: a file (the log fills), or
    /// standard input (its spool, in the journal's directory, fills the disk first).
    enum Case: String, CaseIterable { case http2, enhanced, http2Piped }

    /// Runs inside the namespace, in the test's directory: mounts the tmpfs
    /// on `fs` (exit 90 when it cannot), notes when it filled (a watcher
    /// polling its free blocks and the send's first ENOSPC, whichever comes
    /// first: a write larger than the space left fails with blocks still free), sends, grows it, resumes, copies the journal out.
    /// Piped, the spool was cut where the disk filled: the resume is the
    /// documented `plan | send --resume --replan`.
    static let script = #"""
    set -u
    campaign=$1 size=$2 piped=$3; shift 3
    mount -t tmpfs -o size="$size",mode=0700 tmpfs fs || exit 90
    ( while [ "$(stat -f -c %a fs)" != 0 ] && ! grep -qs "No space left on device" first.err; do sleep 0.01; done; date +%s.%N > full-at ) &
    watcher=$!
    if [ "$piped" = yes ]; then
        "$campaign" plan job.json audience.csv --rejects rejects.ndjson 2> plan.err | "$campaign" send --journal fs/journal "$@" 2> first.err
    else
        "$campaign" send plan.ndjson --journal fs/journal "$@" 2> first.err
    fi
    echo $? > first.status
    date +%s.%N > first-end
    # The watcher sees a failure the send wrote just before it ended: a moment to note it (bounded), then it goes.
    for _ in $(seq 100); do kill -0 $watcher 2>/dev/null || break; sleep 0.01; done
    kill $watcher 2>/dev/null
    mount -o remount,size=16m fs || exit 91
    if [ "$piped" = yes ]; then
        "$campaign" plan job.json audience.csv --rejects rejects.ndjson 2> plan.err | "$campaign" send --resume fs/journal --replan 2> resume.err
    else
        "$campaign" send --resume fs/journal 2> resume.err
    fi
    echo $? > resume.status
    cp -r fs/journal journal
    """#

    /// tmpfs sizes the journal outgrows a third to half way through the send
    /// (an HTTP/2 journal grows about three times faster: an answer a request;
    /// a spool takes some 300 bytes a record, as it is read).
    static func size(_ c: Case) -> String {
        switch c {
        case .http2: "64k"
        case .enhanced: "32k"
        case .http2Piped: "256k"
        }
    }

    /// Whether this machine lets an unprivileged process mount a tmpfs in a
    /// user and mount namespace of its own (a container may forbid it: then
    /// the test says so and is skipped, rather than failing on the machine).
    static let namespacesAvailable: Bool = {
        let probe = Process()
        probe.executableURL = URL(fileURLWithPath: "/bin/sh")
        probe.arguments = ["-c", #"command -v unshare >/dev/null && unshare -rm sh -c 'd=$(mktemp -d) && mount -t tmpfs -o size=4k tmpfs "$d" && umount "$d"; r=$?; rmdir "$d"; exit $r'"#]
        probe.standardOutput = FileHandle.nullDevice
        probe.standardError = FileHandle.nullDevice
        guard (try? probe.run()) != nil else { return false }
        probe.waitUntilExit()
        return probe.terminationStatus == 0
    }()

    @Test(.timeLimit(.minutes(2)), .enabled(if: namespacesAvailable, "needs unshare -rm and a tmpfs mount (user and mount namespaces)"),
          arguments: Case.allCases)
    func aFullJournalDiskEnds74WithinTheStopBoundAndAResumeWithSpaceDeliversTheRest(_ setup: Case) async throws {
        let dir = TemporaryDirectory("fulldisk")
        let simulator: GatewaySimulator
        let tokens: Set<String>
        if setup != .enhanced {
            simulator = try startHTTP2Simulator(in: dir)
            tokens = Set(try H2SendTests.plan(count: 3_000, in: dir))
        } else {
            simulator = try SendProcessTests.simulator(in: dir)
            tokens = try SendProcessTests.plan(count: 3_000, into: dir.file("plan.ndjson"), seed: 33)
        }
        defer { simulator.stop() }
        try FileManager.default.createDirectory(atPath: dir.file("fs"), withIntermediateDirectories: true)
        try Self.script.write(toFile: dir.file("full.sh"), atomically: true, encoding: .utf8)
        let run = try CampaignProcess(["-rm", "sh", "full.sh", SimulatorProcessTests.binary.path, Self.size(setup), setup == .http2Piped ? "yes" : "no",
                                       "--gateway", "127.0.0.1:\(simulator.port)", "--connections", "2", "--rate", "1000"]
                                      + SendProcessTests.credentials(),
                                      in: dir.path, executable: URL(fileURLWithPath: "/usr/bin/unshare"), environment: ProxyTests.cleanEnvironment)
        let status = await run.exitStatus(within: 90)
        if status == nil { kill(run.process.processIdentifier, SIGKILL) }
        guard status != 90, !run.stderr.contains("unshare:") else {
            Issue.record("""
                this machine refuses a user and mount namespace (unshare -rm) or a tmpfs in it, so the journal's disk \
                cannot be filled: \(run.stderr)
                """)
            return
        }
        #expect(status == 0, "the script ended (\(status.map(String.init) ?? "not within 90 s")): \(run.stderr)")
        func read(_ name: String) -> String {
            ((try? String(contentsOfFile: dir.file(name), encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let firstErr = read("first.err")
        #expect(read("first.status") == "74", "a full journal disk is an I/O error: \(firstErr)")
        #expect(firstErr.contains("No space left on device"), "\(firstErr)")
        let fullAt = try #require(Double(read("full-at")), "the journal's disk never filled: \(firstErr)")
        let ended = try #require(Double(read("first-end")))
        #expect(ended - fullAt < 10, "the send ended \(ended - fullAt) s after the disk filled: more than its stop bound (10 s)")
        #expect(read("resume.status") == "0", "\(read("resume.err"))")

        simulator.stop()
        let recorded = try SendProcessTests.recorded(dir)
        #expect(Set(recorded) == tokens, "\(tokens.subtracting(recorded).count) notifications lost")
        let state = try Journal.read(directory: dir.file("journal"))
        let duplicates = recorded.count - Set(recorded).count
        #expect(state.outcome == .complete && state.doneCount == tokens.count)
        #expect(state.runs == 2)
        // A write-ahead that cannot be journaled stops the write it covers: nothing
        // reaches the gateway that the journal never heard of.
        #expect(duplicates <= state.duplicatesRisked, "\(duplicates) duplicates but \(state.duplicatesRisked) reported")
        print("full disk, \(setup): 74 after \(String(format: "%.2f", ended - fullAt)) s, \(duplicates) duplicates (\(state.duplicatesRisked) reported)")
    }
}
