import Foundation
import CampaignTLS
import GatewaySimulator

/// The simulator's HTTP/2 provider API, in-process on port 0, recording to
/// `dir/record.ndjson`; with `tokens`, provider tokens are checked against
/// the test certificates' development key; with `latencyMilliseconds`,
/// every byte is held that long each way (a round trip of twice that);
/// `configure` sets anything else (the management port, channel options).
public func startHTTP2Simulator(in dir: TemporaryDirectory, faults: FaultPlan = FaultPlan(), tokens: Bool = false,
                                latencyMilliseconds: Int = 0,
                                configure: (inout SimulatorConfiguration) -> Void = { _ in }) throws -> GatewaySimulator {
    var configuration = SimulatorConfiguration(certificatesDirectory: TestCertificates.directory)
    configuration.latencyMilliseconds = latencyMilliseconds
    configuration.http2 = true
    configuration.recordPath = dir.file("record.ndjson")
    configuration.faults = faults
    if tokens { configuration.authKeysDirectory = TestCertificates.path(DevelopmentCertificates.authKeysDirectory) }
    configure(&configuration)
    let simulator = try GatewaySimulator(configuration: configuration)
    try simulator.start()
    return simulator
}

/// Runs a program found on PATH to its end; its standard output and error together.
public func runTool(_ tool: String, _ arguments: [String]) throws -> (status: Int32, out: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = [tool] + arguments
    let out = Pipe()
    process.standardOutput = out
    process.standardError = out
    try process.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return (process.terminationStatus, text)
}

/// Waits (bounded) until `condition` holds, checking every 20 ms; whether it did.
public func eventually(within seconds: Double, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(20_000)
    }
    return condition()
}

/// Waits (bounded) until `condition` holds, checking every 20 ms without
/// holding a thread (for async tests that run side by side); whether it did.
public func eventually(within seconds: Double, _ condition: () -> Bool) async -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return condition()
}
