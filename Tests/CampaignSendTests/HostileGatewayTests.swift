import Foundation
import Testing
import APNSWire
import CampaignIO
import CampaignPlan
import PlanStream
import CampaignTLS
import CampaignTestSupport
import GatewaySimulator
@testable import CampaignSend
@testable import SendJournal
@testable import SendEngine

/// A gateway that misbehaves on purpose, on 127.0.0.1: each accepted
/// connection is handed to `behaviour`. Stops with the test.
final class HostileGateway: @unchecked Sendable {
    enum Behaviour: String, CaseIterable {
        /// Reads a little, then answers with bytes that are no error response.
        case garbage
        /// Answers with an error response whose status no guide defines.
        case unknownStatus
        /// Answers status 8 for an identifier the sender never used.
        case unknownIdentifier
        /// Closes the TCP connection in the middle of the TLS handshake.
        case closeMidHandshake
        /// Presents a certificate from an authority the client does not trust.
        case untrustedCertificate
        /// Presents a certificate for another host name.
        case wrongHostName
        /// Reads everything and never answers (not even a proof).
        case silent
        /// Reads a little, then closes without a word (the feedback service with nothing to say).
        case closesAfterReading
        /// Answers as an HTTP/2 server does first: a SETTINGS frame (the provider API's port).
        case http2Settings
    }

    let listener: Listener
    let cancellation: CancellationPipe
    let behaviour: Behaviour
    private let context: TLSContext
    private let accepter: BackgroundTask<Int>

    init(_ behaviour: Behaviour) throws {
        self.behaviour = behaviour
        listener = try Listener(host: "127.0.0.1", port: 0)
        cancellation = try CancellationPipe()
        let identity: TLSIdentity
        switch behaviour {
        case .untrustedCertificate:
            identity = try CertificateAuthority(commonName: "Stranger CA")
                .issue(subject: [("CN", "127.0.0.1")], role: .server(dnsNames: [], ipAddresses: ["127.0.0.1"]))
        case .wrongHostName:
            let ca = try CertificateAuthority(certificate: TestCertificates.path("ca.pem"), key: TestCertificates.path("ca.key"))
            identity = try ca.issue(subject: [("CN", "elsewhere.example")], role: .server(dnsNames: ["elsewhere.example"], ipAddresses: ["10.9.8.7"]))
        default:
            identity = try TLSIdentity.pem(certificate: TestCertificates.path("server.pem"), key: TestCertificates.path("server.key"), passphrase: nil)
        }
        context = try TLSContext.server(identity: identity, clientAuthorities: TestCertificates.path("ca.pem"))
        let (listener, cancellation, context) = (listener, cancellation, context)
        accepter = BackgroundTask {
            var connections = 0
            while let socket = try? listener.accept(cancellation: cancellation) {
                connections += 1
                Thread.detachNewThread { Self.serve(socket, behaviour: behaviour, context: context, cancellation: cancellation) }
            }
            return connections
        }
    }

    var port: Int { listener.port }

    /// Stops accepting; returns how many connections the sender made.
    func stop() throws -> Int {
        cancellation.cancel()
        let n = try accepter.value(timeout: 30)
        listener.close()
        return n
    }

    static func serve(_ socket: Socket, behaviour: Behaviour, context: TLSContext, cancellation: CancellationPipe) {
        if behaviour == .closeMidHandshake {
            var hello = [UInt8](repeating: 0, count: 16)
            _ = hello.withUnsafeMutableBytes { recv(socket.fd, $0.baseAddress, 16, 0) }
            socket.abort()
            return
        }
        guard let tls = try? TLSConnection.accept(socket: socket, context: context, cancellation: cancellation) else {
            socket.close()
            return
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        if behaviour == .silent {
            // Reads until the test ends, answering nothing.
            while (try? tls.read(into: &buffer, cancellation: cancellation, deadline: .after(seconds: 60))) ?? 0 > 0 {}
            tls.abort()
            return
        }
        _ = try? tls.read(into: &buffer, cancellation: cancellation, deadline: .after(seconds: 10))
        var rng = SplitMix64(seed: UInt64(socket.fd))
        let answer: [UInt8]
        switch behaviour {
        case .garbage: answer = (0..<64).map { _ in UInt8(truncatingIfNeeded: rng.next()) | 0x10 }
        case .unknownStatus: answer = [8, 200, 0, 0, 0, 1]
        case .unknownIdentifier: answer = [8, 8, 0x7E, 0xAD, 0xBE, 0xEF]
        case .http2Settings: answer = HostileGatewayTests.settingsFrame
        default: answer = []
        }
        try? tls.write(answer, cancellation: cancellation, deadline: .after(seconds: 10))
        tls.close()
    }
}

@Suite(.ownThreads) struct HostileGatewayTests {
    func send(to gateway: HostileGateway, count: Int = 300, format: String = "enhanced") throws -> (SendReport, JournalState) {
        let dir = TemporaryDirectory("hostile")
        _ = try makePlan(count: count, format: format, in: dir)
        var s = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: gateway.port, certificate: TestCertificates.path("client.pem"))
        s.key = TestCertificates.path("client.key")
        s.caFile = TestCertificates.path("ca.pem")
        s.connections = 2
        s.planPath = dir.file("plan.ndjson")
        s.stallSeconds = 2
        let settings = s
        let task = BackgroundTask { () throws -> SendReport in
            let plan = try PlanReader(path: settings.planPath!)
            let journal = try Journal.create(directory: dir.file("journal"), settings: settings, planHeader: plan.header.json)
            return try Sender(settings: settings, journal: journal, context: TestCertificates.clientContext(), cancellation: CancellationPipe())
                .run(plan: plan)
        }
        let report = try task.value(timeout: 120)
        return (report, try Journal.read(directory: dir.file("journal")))
    }

    @Test(arguments: [HostileGateway.Behaviour.garbage, .unknownStatus, .unknownIdentifier, .closeMidHandshake])
    func aMisbehavingGatewayEndsTheSendResumablyWithNothingClaimed(behaviour: HostileGateway.Behaviour) throws {
        let gateway = try HostileGateway(behaviour)
        let (report, state) = try send(to: gateway)
        let connections = try gateway.stop()
        // Such a gateway accepts nothing, so nothing may be claimed accepted,
        // and the send must end (not hang, not crash) in a state --resume can go on from.
        #expect(report.outcome == .gaveUp, "\(behaviour): \(report.outcome) \(report.message ?? "")")
        if behaviour == .unknownStatus {
            // An error response naming one of ours proves, by the protocol,
            // everything written before it on that connection; the named one
            // is the gateway's trouble (an undefined status): retried, never final.
        } else {
            #expect(report.accepted == 0, "\(behaviour)")
        }
        #expect(state.failures.isEmpty, "\(behaviour): \(state.failures.count) notifications failed for the gateway's fault: \(state.failures.map(\.reason))")
        #expect(state.outcome == .gaveUp, "\(behaviour)")
        #expect(connections >= 2, "\(behaviour): \(connections) connections")
        #expect(report.message?.isEmpty == false)
    }

    /// The simple format has no answers, so what a gateway reads is presumed
    /// delivered once its connection has kept quiet a while; but a peer that
    /// answers at all with bytes that are no error response is no gateway (an
    /// HTTP/2 server's SETTINGS, an HTTP/1 page), and one that closes every
    /// connection at once (the feedback port) delivers nothing: nothing
    /// written to either may be presumed.
    @Test(arguments: [HostileGateway.Behaviour.garbage, .closesAfterReading])
    func aSimpleFormatSendToAPeerThatSpeaksOrClosesAtOncePresumesNothing(behaviour: HostileGateway.Behaviour) throws {
        let gateway = try HostileGateway(behaviour)
        let (report, state) = try send(to: gateway, format: "simple")
        let connections = try gateway.stop()
        #expect(report.outcome == .gaveUp, "\(behaviour): \(report.outcome) \(report.message ?? "")")
        #expect(report.presumed == 0 && state.presumed == 0, "\(behaviour): presumed delivered to a peer that is no gateway: \(report.presumed)")
        #expect(state.doneCount == 0, "\(behaviour): \(state.doneCount) done")
        #expect(report.message?.contains("is it an APNs gateway?") == true, "\(behaviour): \(report.message ?? "")")
        #expect(connections >= 2)
    }

    /// What nghttp2 sends first as a server: SETTINGS, MAX_CONCURRENT_STREAMS 100, INITIAL_WINDOW_SIZE 65,535.
    static let settingsFrame: [UInt8] = [0, 0, 12, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100, 0, 4, 0, 0, 0xFF, 0xFF]

    /// A binary plan sent to the HTTP/2 API's port, in every binary format:
    /// stopped at the first answer with a sentence that says so, nothing
    /// final, not redialled 25 times.
    @Test(arguments: ["simple", "enhanced", "frame"])
    func aBinaryPlanSentToAnHTTP2PortStopsAtOnceSayingSo(format: String) throws {
        let gateway = try HostileGateway(.http2Settings)
        let (report, state) = try send(to: gateway, format: format)
        let connections = try gateway.stop()
        #expect(report.outcome == .gaveUp, "\(format): \(report.outcome)")
        #expect(report.message?.contains("answered in HTTP/2") == true, "\(format): \(report.message ?? "")")
        #expect(report.accepted + report.presumed == 0 && state.doneCount == 0 && state.failures.isEmpty, "\(format): \(state.doneCount) done")
        #expect(connections <= 4, "\(format): \(connections) connections for a port that speaks HTTP/2")
    }

    @Test(arguments: [HostileGateway.Behaviour.untrustedCertificate, .wrongHostName])
    func aGatewayThatCannotBeVerifiedIsNeverSentTo(behaviour: HostileGateway.Behaviour) throws {
        let gateway = try HostileGateway(behaviour)
        let (report, state) = try send(to: gateway)
        _ = try gateway.stop()
        #expect(report.outcome == .credentials, "\(behaviour): \(report.outcome)")
        #expect(report.accepted == 0)
        #expect(state.sentBelow.values.allSatisfy { $0 == 0 }, "\(behaviour): bytes were handed to an unverified gateway")
        let message = report.message ?? ""
        #expect(message.contains("certificate"), "\(behaviour): \(message)")
    }

    /// A stop while the gateway reads but never answers (no proof comes):
    /// the send ends within the stop's grace, not the proof's 60 s stall
    /// bound; what was written stays pending for the resume, counted as
    /// possible duplicates.
    @Test(.timeLimit(.minutes(2))) func aStopEndsWithinItsGraceWhenNoProofComes() throws {
        let gateway = try HostileGateway(.silent)
        defer { _ = try? gateway.stop() }
        let dir = TemporaryDirectory("hostile-silent")
        _ = try makePlan(count: 300, in: dir)
        var s = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: gateway.port, certificate: TestCertificates.path("client.pem"))
        s.key = TestCertificates.path("client.key")
        s.caFile = TestCertificates.path("ca.pem")
        s.connections = 2
        s.planPath = dir.file("plan.ndjson")
        let settings = s
        let header = try PlanReader(path: settings.planPath!).header
        let journal = try Journal.create(directory: dir.file("journal"), settings: settings, planHeader: header.json)
        let sender = try Sender(settings: settings, journal: journal, context: TestCertificates.clientContext(), cancellation: CancellationPipe())
        let task = BackgroundTask { () throws -> SendReport in try sender.run(plan: PlanReader(path: settings.planPath!)) }
        // Everything handed to the connections (journaled before it is written), and its proof awaited.
        #expect(eventually(within: 30) { ((try? Journal.read(directory: dir.file("journal")))?.sentBelow.values.reduce(0, +) ?? 0) >= 300 })
        let stopped = Date()
        sender.requestStop()
        let report = try task.value(timeout: 60)
        let seconds = Date().timeIntervalSince(stopped)
        #expect(seconds < SendShared.stopGraceSeconds + 3, "the stop took \(seconds) s")
        #expect(report.outcome == .interrupted, "\(report.outcome)")
        #expect(report.accepted == 0 && report.failed == 0)
        #expect(report.duplicatesRisked == 300, "written and never proven: \(report.duplicatesRisked)")
    }
}
