// Checkpoints of a training run: every parameter, the AdamW moments and the
// step, so that a resumed run continues with bit-identical losses.
//
// DIR/manifest.json names the state file of the last complete checkpoint and
// is replaced atomically (write, fsync, rename, fsync of DIR) only after that
// state file is durable, so a kill -9 at any moment leaves the previous
// checkpoint usable. DIR/model.safetensors holds the parameters alone under
// the names they were loaded under, for users (past --save-shard-size, as
// Hugging Face's shards with model.safetensors.index.json); it is written
// after the manifest (a kill between the two leaves it one checkpoint
// behind, never ahead).
#pragma once

#include <cstdint>
#include <string>

namespace fy {

class Runtime;

// Writes a checkpoint of `rt` after `step` completed steps.
void save_checkpoint(const Runtime& rt, const std::string& dir, int64_t step);

// A name a checkpoint's own files have in its directory (manifest.json,
// model.safetensors, state-<digits>.safetensors, or their temporaries).
bool is_checkpoint_file_name(std::string name);

// Fails, naming it, unless `dir` is a writable directory or could be made
// one (its nearest existing ancestor is): checked before the run's first
// step, not after hours of it. Creates nothing.
void check_save_dir(const std::string& dir);

// Holds DIR for this run's life: makes it, and takes an advisory lock on
// DIR/.fuyou.lock that the system drops when the process ends however it
// ends, so that a second run saving there is refused at once, naming the
// holder's pid, and a dead run's lock holds nothing up. A directory it made
// that holds no checkpoint when the run ends goes again.
class SaveDirLock {
 public:
  explicit SaveDirLock(const std::string& dir);
  ~SaveDirLock();
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;

 private:
  std::string dir_;
  bool created_ = false;
  int fd_ = -1;
};

// Fails as load_checkpoint would on DIR's manifest (none, corrupt, another
// model, other flags) without reading any state; returns its step. Before
// the weights load, so a resume that cannot work fails in a moment.
int64_t check_checkpoint(const Runtime& rt, const std::string& dir);

// Loads DIR's last checkpoint into `rt` (declared, weights loaded) and returns
// its step. Fails with one line naming the file when DIR has no checkpoint,
// a corrupt or truncated manifest or state, or one of another model.
int64_t load_checkpoint(Runtime& rt, const std::string& dir);

// A fingerprint of the program's parameters (names, shapes, dtypes, trainable).
std::string model_fingerprint(const Runtime& rt);

}  // namespace fy
