#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import Foundation
import Testing
import CampaignTestSupport
import CampaignTLS
@testable import CampaignCommands
import CampaignIO
@testable import CampaignPlan
@testable import PlanStream
@testable import CampaignSend
@testable import SendJournal

@Suite struct ArgumentTests {
    @Test func certsWritesEveryFile() throws {
        let dir = TemporaryDirectory()
        var command = try Campaign.parseAsRoot(["certs", dir.file("c"), "--bundle-id", "com.example.cli"])
        try command.run()
        for name in ["ca.pem", "ca.key", "server.pem", "server.key", "client.pem", "client.key", "client.p12"] {
            #expect(FileManager.default.fileExists(atPath: dir.file("c/\(name)")), "\(name)")
        }
    }

    @Test(arguments: [
        (["simulator", "--certs", "x", "--error-rate", "2"], "--error-rate must be between 0 and 1."),
        (["simulator", "--certs", "x", "--drop-every", "0"], "--drop-every must be at least 1."),
        (["simulator", "--certs", "x", "--port", "70000"], "--port must be between 0 and 65535."),
        (["certs", "x", "--days", "0"], "--days must be at least 1."),
        (["simulator", "--certs", "x", "--management-port", "0"], "--management-port go with --protocol h2."),
        (["simulator", "--certs", "x", "--protocol", "h2", "--management-port", "70000"], "--management-port must be between 0 and 65535."),
        (["simulator", "--certs", "x", "--protocol", "h2", "--channel-limit=-1"], "--channel-limit must not be negative."),
        (["simulator", "--certs", "x", "--protocol", "h2", "--environment", "staging"], "--environment must be sandbox or production."),
        (["simulator", "--certs", "x", "--protocol", "h2", "--management-error-rate", "1.5"], "--management-error-rate must be between 0 and 1."),
        (["simulator", "--certs", "x", "--protocol", "h2", "--channel-id-bytes", "0"], "--channel-id-bytes must be between 1 and 3072."),
        (["send", "plan.ndjson", "--journal", "j", "--gateway", "127.0.0.1:2195", "--cert", "c.pem", "--key", "c.key", "--rate", "-5"], "--rate must not be negative."),
    ])
    func badFlagsAreUsageErrors(arguments: [String], message: String) {
        do {
            _ = try Campaign.parseAsRoot(arguments)
            Issue.record("expected a validation error")
        } catch {
            #expect(Campaign.exitCode(for: error) == CampaignExit.usage)
            #expect(Campaign.message(for: error) == message)
        }
    }
}

/// Every subcommand maps errors to exit codes through one function.
@Suite struct ExitCodeMappingTests {
    @Test func eachKindOfErrorHasTheREADMEsCode() {
        #expect(exitCode(for: TLSError(.wrongPassphrase(path: "p.p12")), command: "t") == CampaignExit.credentials)
        #expect(exitCode(for: TLSError(.timedOut(operation: "connecting")), command: "t") == CampaignExit.unavailable)
        #expect(exitCode(for: PlanError(path: "p", line: 0, reason: .noTrailer), command: "t") == CampaignExit.incompletePlan)
        #expect(exitCode(for: PlanError(path: "p", line: 2, reason: .noHeader), command: "t") == CampaignExit.unusableInput)
        #expect(exitCode(for: JournalError(path: "j", reason: .damagedRecord(offset: 0)), command: "t") == CampaignExit.unusableInput)
        #expect(exitCode(for: IOError(path: "f", reason: "gone"), command: "t") == CampaignExit.unusableInput)
        #expect(exitCode(for: IOError(path: "f", operation: "write", errno: ENOSPC), command: "t") == CampaignExit.ioError)
        #expect(exitCode(for: JournalError(path: "j", reason: .busy(pid: nil)), command: "t") == CampaignExit.interrupted)
        // A journal is a record of what was sent: a new send does not write over it.
        #expect(exitCode(for: JournalError(path: "j", reason: .alreadyExists), command: "t") == CampaignExit.cannotCreate)
        #expect(exitCode(for: CampaignExit.interrupted, command: "t") == CampaignExit.interrupted)
        struct Odd: Error {}
        #expect(exitCode(for: Odd(), command: "t") == CampaignExit.failure)
    }
}

/// Drives the built `campaign` binary as a user would, with a client that is
/// not ours (Python's ssl module) to show the simulator takes any correct client.
@Suite(.ownThreads) struct SimulatorProcessTests {
    static var binary: URL {
        let dir = Bundle.main.bundleURL.pathExtension == "xctest" ? Bundle.main.bundleURL.deletingLastPathComponent() : Bundle.main.bundleURL
        return dir.appendingPathComponent("campaign")
    }

    static let client = #"""
import socket, ssl, struct, sys
port, certs = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=certs + "/ca.pem")
ctx.load_cert_chain(certs + "/client.pem", certs + "/client.key")
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
def tok(n): return bytes((i * 7 + n) % 256 for i in range(32))
pl = lambda t: ('{"aps":{"alert":"%s"}}' % t).encode()
def enhanced(i, t, p): return struct.pack(">BIIH", 1, i, 0, 32) + t + struct.pack(">H", len(p)) + p
def frame(i, t, p):
    items = struct.pack(">BHB", 5, 1, 5) + struct.pack(">BHI", 3, 4, i) + struct.pack(">BH", 2, len(p)) + p + struct.pack(">BH", 1, len(t)) + t
    return struct.pack(">BI", 2, len(items)) + items
def simple(t, p): return struct.pack(">BH", 0, 32) + t + struct.pack(">H", len(p)) + p
s.sendall(enhanced(1, tok(1), pl("one")) + frame(2, tok(2), pl("two")) + simple(tok(3), pl("three"))
          + frame(4, tok(99), pl("bad")) + enhanced(5, tok(5), pl("five")))
data = b""
while True:
    try:
        chunk = s.recv(64)
    except (ConnectionResetError, ssl.SSLError):
        break
    if not chunk: break
    data += chunk
print(data.hex())
"""#

    @Test func theBinaryServesAForeignClientAndStopsOnSIGTERM() throws {
        let dir = TemporaryDirectory()
        let certs = dir.file("certs")
        try DevelopmentCertificates.write(to: certs, bundleID: "com.example.process")
        let badToken = (0..<32).map { String(format: "%02x", ($0 * 7 + 99) % 256) }.joined()
        try (badToken + "\n").write(toFile: dir.file("bad.txt"), atomically: true, encoding: .utf8)

        let simulator = Process()
        simulator.executableURL = Self.binary
        simulator.arguments = ["simulator", "--certs", certs, "--record", dir.file("record.ndjson"), "--stats", dir.file("stats.json"),
                               "--bad-tokens", dir.file("bad.txt"), "--max-seconds", "120"]
        let stderr = Pipe()
        simulator.standardError = stderr
        try simulator.run()
        defer { if simulator.isRunning { simulator.terminate() } }

        // The first line names the ports; the process ends (closing the pipe) if anything goes wrong.
        var banner = ""
        while !banner.contains("\n") {
            let chunk = stderr.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            banner += String(decoding: chunk, as: UTF8.self)
        }
        let port = try #require(banner.firstMatch(of: /gateway on 127\.0\.0\.1:(\d+)/).map { String($0.1) })

        let python = Process()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        python.arguments = ["python3", "-c", Self.client, port, certs]
        let out = Pipe()
        python.standardOutput = out
        try python.run()
        let response = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        python.waitUntilExit()
        #expect(python.terminationStatus == 0)
        #expect(response.trimmingCharacters(in: .whitespacesAndNewlines) == "080800000004")

        simulator.terminate()   // SIGTERM
        let rest = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        simulator.waitUntilExit()
        #expect(simulator.terminationReason == .exit)
        #expect(simulator.terminationStatus == 0)
        #expect(rest.contains("simulator: 3 accepted, rejected status 8 (invalid token): 1, 1 discarded"))
        #expect(!rest.contains(badToken))

        let lines = try String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 3)
        #expect(lines[1].contains(#""cmd":2,"id":2,"expiry":null,"priority":5"#))
        let stats = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir.file("stats.json")))) as? [String: Any]
        #expect(stats?["accepted"] as? Int == 3)
        let mode = try FileManager.default.attributesOfItem(atPath: dir.file("record.ndjson"))[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }
}

/// `campaign plan` as a user runs it: stdin to stdout, exit codes, files 0600.
@Suite(.ownThreads) struct PlanProcessTests {
    static func run(_ arguments: [String], stdin: Data? = nil, in dir: TemporaryDirectory) throws -> (status: Int32, out: Data, err: String) {
        let process = Process()
        process.executableURL = SimulatorProcessTests.binary
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: dir.path)
        let out = Pipe(), err = Pipe(), input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        // Feed standard input from another thread: the child fills its output
        // pipe while it reads, and would block if nobody drained it.
        let writer = input.fileHandleForWriting
        let feeding = DispatchGroup()
        DispatchQueue.global().async(group: feeding) {
            if let stdin { writer.write(stdin) }
            try? writer.close()
        }
        defer { feeding.wait() }
        let output = out.fileHandleForReading.readDataToEndOfFile()
        let error = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output, error)
    }

    static var repo: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }

    @Test func plansTheSampleAudienceFromStandardInputToStandardOutput() throws {
        let dir = TemporaryDirectory()
        let audience = try Data(contentsOf: URL(fileURLWithPath: Self.repo + "/samples/audience.csv"))
        let result = try Self.run(["plan", Self.repo + "/jobs/spring.json", "-", "--summary", "summary.json"], stdin: audience, in: dir)
        #expect(result.status == 0)
        let lines = result.out.split(separator: UInt8(ascii: "\n"))
        #expect(String(decoding: lines.first!, as: UTF8.self).hasPrefix(#"{"header":"#))
        #expect(String(decoding: lines.last!, as: UTF8.self).hasPrefix(#"{"trailer":{"records":2994,"#))
        #expect(result.err.contains("plan: 3002 rows read, 2994 planned, 8 rejected"))
        #expect(!result.err.contains("bd5fda499a369c0f"))   // no token in the log
        let rejects = dir.file("spring-sale.rejects.ndjson")
        #expect(try String(contentsOfFile: rejects, encoding: .utf8).split(separator: "\n").count == 8)
        #expect(try FileManager.default.attributesOfItem(atPath: rejects)[.posixPermissions] as? Int == 0o600)
        let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir.file("summary.json")))) as? [String: Any]
        #expect(summary?["planned"] as? Int == 2994)
    }

    @Test func unusableInputsExit66WithOneLine() throws {
        let dir = TemporaryDirectory()
        try "{\"campaign\":\"x\"}".write(toFile: dir.file("bad.json"), atomically: true, encoding: .utf8)
        try "name\nx\n".write(toFile: dir.file("a.csv"), atomically: true, encoding: .utf8)
        for (args, message) in [
            (["plan", "missing.json", "a.csv"], "campaign plan: missing.json: no such file.\n"),
            (["plan", "bad.json", "a.csv"], "campaign plan: bad.json: \"messages\" must be an object with at least one language, e.g. {\"en\": {\"alert\": \"Hi\"}}.\n"),
            (["plan", Self.repo + "/jobs/spring.json", "a.csv"], "campaign plan: a.csv: has no token column (its columns are: name).\n"),
            (["plan", Self.repo + "/jobs/spring.json", "none.csv"], "campaign plan: none.csv: no such file.\n"),
        ] {
            let result = try Self.run(args, in: dir)
            #expect(result.status == 66, "\(args)")
            #expect(result.err == message)
        }
    }
}

/// `plan --column` and an export that names its token otherwise, as a user meets them.
@Suite struct PlanColumnTests {
    static let job = #"{"campaign":"c","fallback":["en"],"messages":{"en":{"alert":"Hi {first_name|there}"}}}"#

    @Test func aColumnWithoutASourceIsAUsageError() {
        do {
            _ = try Campaign.parseAsRoot(["plan", "job.json", "a.csv", "--column", "first_name"])
            Issue.record("expected a validation error")
        } catch {
            #expect(Campaign.exitCode(for: error) == CampaignExit.usage)
            #expect(Campaign.message(for: error) == "--column takes NAME=SOURCE (our name, then the export's column), not \"first_name\".")
        }
    }

    @Test func anExportNamingItsTokenOtherwiseStopsWith66UntilMapped() throws {
        let dir = TemporaryDirectory()
        try Self.job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
        let token = String(repeating: "ab", count: 32)
        try #"{"push_id":"\#(token)","user":{"name":"Ana"}}"#.write(toFile: dir.file("a.ndjson"), atomically: true, encoding: .utf8)
        var command = try Campaign.parseAsRoot(["plan", dir.file("job.json"), dir.file("a.ndjson"), "--out", dir.file("plan")])
        #expect { try command.run() } throws: { Campaign.exitCode(for: $0) == CampaignExit.unusableInput }
        #expect(!FileManager.default.fileExists(atPath: dir.file("plan")), "no plan is left")
        command = try Campaign.parseAsRoot(["plan", dir.file("job.json"), dir.file("a.ndjson"), "--out", dir.file("plan"),
                                            "--column", "token=push_id", "--column", "first_name=user.name"])
        try command.run()
        let plan = try String(contentsOfFile: dir.file("plan"), encoding: .utf8)
        #expect(plan.contains(#"Hi Ana"#) && plan.contains(#""records":1"#))
    }
}
