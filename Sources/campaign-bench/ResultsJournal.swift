import Foundation
import CampaignSend
import PlanStream
import SendJournal

/// `campaign-bench results-journal PLAN DIR`: a journal for PLAN whose every
/// record was accepted in one run starting now, as a send would leave it
/// (its clock, one done record per shard, its end): what `campaign results`
/// reads, made in seconds instead of a 10-million-notification send.
func writeResultsJournal(_ arguments: [String]) throws {
    guard arguments.count == 2 else { fatalError("usage: campaign-bench results-journal PLAN DIR") }
    let (planPath, directory) = (arguments[0], arguments[1])
    let plan = try PlanReader(path: planPath)
    var counts = [Int](repeating: 0, count: plan.header.shards)
    while try plan.nextView({ counts[$0.shard] += 1 }) {}
    var settings = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 2197, certificate: "bench.pem")
    settings.planPath = (planPath as NSString).isAbsolutePath ? planPath : FileManager.default.currentDirectoryPath + "/" + planPath
    let journal = try Journal.create(directory: directory, settings: settings, planHeader: plan.header.json)
    try journal.append(.clock(unixSeconds: Int(Date().timeIntervalSince1970)))
    try journal.append(.plan(records: counts.reduce(0, +), crc32: plan.trailer?.crc32, incomplete: false))
    for (shard, n) in counts.enumerated() where n > 0 { try journal.append(.done(shard: shard, ranges: [0..<n])) }
    try journal.append(.end(outcome: .complete))
    try journal.checkpoint()
    print("\(directory): \(counts.reduce(0, +)) records accepted")
}
