// An independent reader of TensorBoard event files for tensorboard_test.cpp: the TFRecord
// framing checked with the CRC-32C, mask and uint64 reader of the npm package
// @roboflow/tfrecords, each record decoded with protobufjs from TensorBoard's published
// event.proto / summary.proto (the fields used here, with their numbers, restated below).
// Usage: NODE_PATH=third_party/npm/node_modules node read_tfevents.js FILE
// Prints one line per event: "version\t<file_version>" or
// "scalar\t<step>\t<tag>\t<simple_value>\t<wall_time>". Exits 1 on a bad CRC or a
// truncated record, naming its offset.
const fs = require('fs');
const protobuf = require('protobufjs');
const tfr = require('@roboflow/tfrecords/src/tensorFlowHelpers');

const proto = `
syntax = "proto3";
package tensorboard;
message SummaryMetadata {
  message PluginData { string plugin_name = 1; bytes content = 2; }
  PluginData plugin_data = 1;
  string display_name = 2;
  string summary_description = 3;
}
message Summary {
  message Value {
    string node_name = 7;
    string tag = 1;
    SummaryMetadata metadata = 9;
    oneof value {
      float simple_value = 2;
      bytes obsolete_old_style_histogram = 3;
    }
  }
  repeated Value value = 1;
}
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what {
    string file_version = 3;
    bytes graph_def = 4;
    Summary summary = 5;
  }
}`;
const Event = protobuf.parse(proto).root.lookupType('tensorboard.Event');

const buf = fs.readFileSync(process.argv[2]);
const fail = (msg) => { console.error(msg); process.exit(1); };
let pos = 0;
while (pos < buf.length) {
  if (pos + 12 > buf.length) fail(`truncated record header at ${pos}`);
  const lenBytes = buf.slice(pos, pos + 8);
  const len = tfr.readInt64(lenBytes);
  if (tfr.maskCrc(tfr.crc32c(lenBytes)) !== buf.readUInt32LE(pos + 8))
    fail(`bad length CRC at ${pos}`);
  pos += 12;
  if (pos + len + 4 > buf.length) fail(`truncated record at ${pos - 12}`);
  const data = buf.slice(pos, pos + len);
  if (tfr.maskCrc(tfr.crc32c(data)) !== buf.readUInt32LE(pos + len))
    fail(`bad data CRC at ${pos - 12}`);
  pos += len + 4;
  const e = Event.toObject(Event.decode(data), { longs: String, oneofs: true });
  const step = e.step || '0';  // proto3 leaves a zero step out
  if (e.what === 'fileVersion') {
    console.log(`version\t${e.fileVersion}`);
  } else if (e.what === 'summary') {
    for (const v of e.summary.value) {
      if (v.value !== 'simpleValue') fail(`a value without simple_value at ${pos}`);
      console.log(`scalar\t${step}\t${v.tag}\t${v.simpleValue}\t${e.wallTime}`);
    }
  } else {
    fail(`event without file_version or summary at ${pos}`);
  }
}
