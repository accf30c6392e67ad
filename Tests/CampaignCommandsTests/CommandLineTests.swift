import ArgumentParser
import Foundation
import Testing
import CampaignTestSupport
import CampaignTLS
@testable import CampaignCommands

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

/// Drives the built `campaign` binary as a user would, with a client that is
/// not ours (Python's ssl module) to show the simulator takes any correct client.
@Suite struct SimulatorProcessTests {
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
        #expect(rest.contains("simulator: 3 accepted, rejected status 8: 1, 1 discarded"))
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
