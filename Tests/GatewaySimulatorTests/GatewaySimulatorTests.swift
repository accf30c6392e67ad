import Foundation
import Testing
import APNSWire
import CampaignTLS
import CampaignTestSupport
@testable import GatewaySimulator

/// A simulator on 127.0.0.1, port 0, with a record file, stopped when released.
final class RunningSimulator {
    let directory = TemporaryDirectory("simulator")
    let simulator: GatewaySimulator

    init(faults: FaultPlan = FaultPlan(), feedback: [FeedbackTuple] = []) throws {
        var configuration = SimulatorConfiguration(certificatesDirectory: TestCertificates.directory)
        configuration.recordPath = directory.file("record.ndjson")
        configuration.statisticsPath = directory.file("stats.json")
        configuration.readyPath = directory.file("ready.json")
        configuration.faults = faults
        configuration.feedback = feedback
        simulator = try GatewaySimulator(configuration: configuration)
        try simulator.start()
    }

    deinit { simulator.stop() }

    func connect(port: Int? = nil, context: TLSContext? = nil) throws -> TLSConnection {
        try TLSConnection.connect(host: "127.0.0.1", port: port ?? simulator.port, context: context ?? TestCertificates.clientContext(), timeout: 10)
    }

    /// Everything the server sends until it closes the connection.
    func readUntilClosed(_ connection: TLSConnection) throws -> [UInt8] {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = try readOrReset(connection, into: &buffer)
            if n == 0 { return received }
            received += buffer[0..<n]
        }
    }

    /// A reset after the server's close counts as closed.
    private func readOrReset(_ connection: TLSConnection, into buffer: inout [UInt8]) throws -> Int {
        do {
            return try connection.read(into: &buffer, deadline: .after(seconds: 20))
        } catch {
            if case .connectionReset = error.kind { return 0 }
            throw error
        }
    }

    /// The record's lines as dictionaries; stops the simulator first so every line is flushed.
    func recorded() throws -> [[String: Any]] {
        simulator.stop()
        let data = try Data(contentsOf: URL(fileURLWithPath: directory.file("record.ndjson")))
        return try data.split(separator: UInt8(ascii: "\n")).map {
            try #require(try JSONSerialization.jsonObject(with: Data($0)) as? [String: Any])
        }
    }
}

func token(_ seed: UInt8, count: Int = 32) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7) &+ seed } }
func payload(_ text: String) -> [UInt8] { Array(#"{"aps":{"alert":"\#(text)"}}"#.utf8) }

@Suite(.ownThreads) struct GatewaySimulatorTests {
    @Test func badTokenInTheMiddleOfAllThreeFormats() throws {
        var faults = FaultPlan()
        faults.badTokens = [token(99)]
        let sim = try RunningSimulator(faults: faults)
        let notifications = [
            Notification(format: .enhanced, token: token(1), payload: payload("one"), identifier: 1, expiry: 1_900_000_000),
            Notification(format: .frame, token: token(2, count: 64), payload: payload("two"), identifier: 2, expiry: 0, priority: .conservePower),
            Notification(format: .simple, token: token(3), payload: payload(#"three \"quoted\" ¡ñ"#)),
            Notification(format: .frame, token: token(99), payload: payload("bad"), identifier: 4, expiry: 0, priority: .immediate),
            Notification(format: .enhanced, token: token(5), payload: payload("five"), identifier: 5, expiry: 0),
            Notification(format: .frame, token: token(6), payload: payload("six"), identifier: 6),
        ]
        var bytes: [UInt8] = []
        for n in notifications { n.encode(into: &bytes) }
        let connection = try sim.connect()
        try connection.write(bytes)
        let response = try sim.readUntilClosed(connection)
        #expect(response == ErrorResponse(status: .invalidToken, identifier: 4).encoded())

        let lines = try sim.recorded()
        #expect(lines.count == 3)
        #expect(lines.map { $0["cmd"] as? Int } == [1, 2, 0])
        #expect(lines[0]["id"] as? Int == 1 && lines[0]["expiry"] as? Int == 1_900_000_000)
        #expect(lines[0]["priority"] is NSNull)
        #expect(lines[1]["id"] as? Int == 2 && lines[1]["priority"] as? Int == 5)
        #expect(lines[2]["id"] is NSNull && lines[2]["expiry"] is NSNull)
        #expect(lines[1]["token"] as? String == DeviceToken(bytes: token(2, count: 64)).hex)
        #expect(lines[2]["payload"] as? String == String(decoding: payload(#"three \"quoted\" ¡ñ"#), as: UTF8.self))
        #expect(lines.allSatisfy { $0["conn"] as? Int == 1 })

        let stats = sim.simulator.currentStatistics()
        #expect(stats.accepted == 3)
        #expect(stats.rejected == [8: 1])
        #expect(stats.discarded == 2)
        let written = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: sim.directory.file("stats.json")))) as? [String: Any]
        #expect(written?["accepted"] as? Int == 3)
        #expect((written?["rejected"] as? [String: Int]) == ["8": 1])
    }

    @Test func aCommandZeroRefusalClosesWithoutAResponse() throws {
        var faults = FaultPlan()
        faults.badTokens = [token(9)]
        let sim = try RunningSimulator(faults: faults)
        var bytes = Notification(format: .simple, token: token(1), payload: payload("a")).encoded()
        Notification(format: .simple, token: token(9), payload: payload("b")).encode(into: &bytes)
        let connection = try sim.connect()
        try connection.write(bytes)
        #expect(try sim.readUntilClosed(connection).isEmpty)
        #expect(try sim.recorded().count == 1)
    }

    @Test func malformedPacketsGetTheGuidesStatusCodes() throws {
        let cases: [([UInt8], ErrorResponse)] = [
            ([0x63, 1, 2, 3], ErrorResponse(status: .protocolError, identifier: 0)),
            (Notification(format: .enhanced, token: token(1, count: 31), payload: payload("x"), identifier: 77, expiry: 0).encoded(),
             ErrorResponse(status: .invalidTokenSize, identifier: 77)),
            (Notification(format: .enhanced, token: token(1), payload: Array(repeating: 0x20, count: 257), identifier: 78, expiry: 0).encoded(),
             ErrorResponse(status: .invalidPayloadSize, identifier: 78)),
            (Notification(format: .frame, token: token(1), payload: Array(#"{"alert":"no aps"}"#.utf8), identifier: 79).encoded(),
             ErrorResponse(status: .invalidPayloadSize, identifier: 79)),
            (Notification(format: .frame, token: [], payload: payload("x"), identifier: 80).encoded(),
             ErrorResponse(status: .missingDeviceToken, identifier: 0)),
        ]
        let sim = try RunningSimulator()
        for (bytes, expected) in cases {
            let connection = try sim.connect()
            try connection.write(bytes)
            #expect(try sim.readUntilClosed(connection) == expected.encoded())
        }
        #expect(try sim.recorded().isEmpty)
    }

    @Test func shutdownNamesTheLastAcceptedIdentifier() throws {
        var faults = FaultPlan()
        faults.shutdownAfter = 3
        let sim = try RunningSimulator(faults: faults)
        var bytes: [UInt8] = []
        for id in 1...6 { Notification(format: .enhanced, token: token(UInt8(id)), payload: payload("n"), identifier: UInt32(100 + id), expiry: 0).encode(into: &bytes) }
        let connection = try sim.connect()
        try connection.write(bytes)
        #expect(try sim.readUntilClosed(connection) == ErrorResponse(status: .shutdown, identifier: 103).encoded())
        #expect(try sim.recorded().map { $0["id"] as? Int } == [101, 102, 103])
    }

    @Test func dropEveryClosesHardWithoutAPacket() throws {
        var faults = FaultPlan()
        faults.dropEvery = 2
        let sim = try RunningSimulator(faults: faults)
        var bytes: [UInt8] = []
        for id in 1...5 { Notification(format: .frame, token: token(UInt8(id)), payload: payload("n"), identifier: UInt32(id)).encode(into: &bytes) }
        let connection = try sim.connect()
        try connection.write(bytes)
        #expect(try sim.readUntilClosed(connection).isEmpty)
        #expect(try sim.recorded().count == 2)
        #expect(sim.simulator.currentStatistics().connections.first?.ending == "dropped after 2 accepted")
    }

    @Test func aPoisonTokenClosesTheConnectionHardWithoutAcceptingIt() throws {
        var faults = FaultPlan()
        faults.poisonTokens = [token(3)]
        let sim = try RunningSimulator(faults: faults)
        var bytes: [UInt8] = []
        for id in 1...5 { Notification(format: .frame, token: token(UInt8(id)), payload: payload("n"), identifier: UInt32(id)).encode(into: &bytes) }
        let connection = try sim.connect()
        try connection.write(bytes)
        #expect(try sim.readUntilClosed(connection).isEmpty, "no error response")
        #expect(try sim.recorded().count == 2, "the two before it, not it")
        #expect(sim.simulator.currentStatistics().connections.first?.ending == "dropped on a poison token")
    }

    @Test func errorRateAnswersProcessingErrors() throws {
        var faults = FaultPlan()
        faults.errorRate = 1
        let sim = try RunningSimulator(faults: faults)
        let connection = try sim.connect()
        try connection.write(Notification(format: .enhanced, token: token(1), payload: payload("n"), identifier: 42, expiry: 0).encoded())
        #expect(try sim.readUntilClosed(connection) == ErrorResponse(status: .processingError, identifier: 42).encoded())
    }

    @Test func aClientCertificateFromAnotherCAIsRefusedAndCounted() throws {
        let sim = try RunningSimulator()
        let stranger = try CertificateAuthority(commonName: "stranger")
        let identity = try stranger.issue(subject: [("CN", "intruder")], role: .client)
        let context = try TLSContext.client(identity: identity, trust: .file(TestCertificates.path("ca.pem")))
        #expect(throws: TLSError.self) { try sim.connect(context: context) }
        #expect(sim.simulator.waitForStatistics { $0.handshakeFailures == 1 })
        #expect(sim.simulator.currentStatistics().connections.isEmpty)
    }

    @Test func acceptsAnyFramingTheGuidesAllow() throws {
        let sim = try RunningSimulator()
        // Items in another order, a 100-byte token, a 2 KB payload, written a byte at a time.
        var frame: [UInt8] = [2]
        let bigPayload = Array(#"{"aps":{"alert":""#.utf8) + Array(repeating: UInt8(ascii: "a"), count: 2048 - 20) + Array(#""}}"#.utf8)
        var items: [UInt8] = [5, 0, 1, 10, 3, 0, 4, 0, 0, 0, 9, 1, 0, 100] + token(4, count: 100)
        items += [2, 0x08, 0x00] + bigPayload
        frame += [0, 0, UInt8(items.count >> 8), UInt8(items.count & 0xFF)] + items
        let connection = try sim.connect()
        for byte in frame { try connection.write([byte]) }
        // Two enhanced notifications in one write, then close cleanly.
        var more: [UInt8] = []
        for id in 10...11 { Notification(format: .enhanced, token: token(UInt8(id)), payload: payload("x"), identifier: UInt32(id), expiry: 0).encode(into: &more) }
        try connection.write(more)
        connection.close()
        #expect(sim.simulator.waitForStatistics { $0.accepted == 3 && $0.connections.first?.ending == "client closed" })
        let lines = try sim.recorded()
        #expect(lines.map { $0["id"] as? Int } == [9, 10, 11])
        #expect((lines[0]["payload"] as? String)?.utf8.count == 2048)
        #expect(lines[0]["priority"] as? Int == 10)
    }

    @Test func feedbackIsServedOnceThenCleared() throws {
        let tuples = (0..<5).map { FeedbackTuple(timestamp: 1_700_000_000 + UInt32($0), token: token(UInt8($0))) }
        let sim = try RunningSimulator(feedback: tuples)
        func readTuples() throws -> [FeedbackTuple] {
            let connection = try sim.connect(port: sim.simulator.feedbackPort)
            var decoder = FeedbackTupleDecoder()
            decoder.append(try sim.readUntilClosed(connection))
            var out: [FeedbackTuple] = []
            while let t = try decoder.next() { out.append(t) }
            #expect(decoder.bufferedByteCount == 0)
            return out
        }
        #expect(try readTuples() == tuples)
        #expect(try readTuples().isEmpty)
        #expect(sim.simulator.currentStatistics().feedbackServed == 5)
    }

    @Test func readyFileNamesBothPorts() throws {
        let sim = try RunningSimulator()
        let ready = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: sim.directory.file("ready.json")))) as? [String: Int]
        #expect(ready == ["port": sim.simulator.port, "feedback_port": sim.simulator.feedbackPort])
        #expect(sim.simulator.port != 0 && sim.simulator.feedbackPort != sim.simulator.port)
    }

    @Test func stopEndsIdleConnectionsAndReturns() throws {
        let sim = try RunningSimulator()
        let idle = try sim.connect()
        #expect(sim.simulator.waitForStatistics { $0.connections.count == 1 })
        sim.simulator.stop()
        #expect(try sim.readUntilClosed(idle).isEmpty)
        #expect(sim.simulator.currentStatistics().connections.first?.ending == "simulator stopped")
    }
}

@Suite struct SimulatorInputTests {
    @Test func badTokenFileErrorsNameTheLine() throws {
        let dir = TemporaryDirectory()
        let path = dir.file("bad.txt")
        try "# comment\n\(DeviceToken(bytes: token(1)).hex)\nnot-hex\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect { try FaultPlan.readTokens(path: path) } throws: { error in
            (error as? SimulatorInputError)?.description == "\(path), line 3: not a hex device token."
        }
    }

    @Test func feedbackFileParses() throws {
        let dir = TemporaryDirectory()
        let path = dir.file("feedback.ndjson")
        try "{\"ts\":1700000000,\"token\":\"\(DeviceToken(bytes: token(1)).hex)\"}\n\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try SimulatorConfiguration.readFeedback(path: path) == [FeedbackTuple(timestamp: 1_700_000_000, token: token(1))])
        try "{\"ts\":\"x\"}\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(throws: SimulatorInputError.self) { try SimulatorConfiguration.readFeedback(path: path) }
    }
}
