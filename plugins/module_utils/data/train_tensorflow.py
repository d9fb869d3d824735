"""kubegpu training check: MultiWorkerMirroredStrategy on fixed random data.

Each worker reads its place in the cluster from TF_CONFIG. Prints one line that starts with
KUBEGPU-TRAIN PASS or KUBEGPU-TRAIN FAIL and exits non-zero on failure.
"""

import json
import os
import sys

import tensorflow as tf

steps = int(os.environ.get("KUBEGPU_STEPS", "50"))
config = json.loads(os.environ.get("TF_CONFIG", "{}"))
task = config.get("task", {})
workers = len(config.get("cluster", {}).get("worker", [])) or 1


def report(ok, text):
    verdict = "PASS" if ok else "FAIL"
    print("KUBEGPU-TRAIN %s worker=%s/%d %s" % (verdict, task.get("index", 0), workers, text),
          flush=True)
    return 0 if ok else 1


# The strategy comes first: it must exist before TensorFlow's runtime starts.
strategy = tf.distribute.MultiWorkerMirroredStrategy()
gpus = tf.config.list_physical_devices("GPU")
if not gpus:
    sys.exit(report(False, "no GPU visible to TensorFlow %s" % tf.__version__))
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(256,)),
        tf.keras.layers.Dense(512, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.05),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
features = tf.random.stateless_normal((4096, 256), seed=(1, 2))
labels = tf.random.stateless_uniform((4096,), seed=(3, 4), maxval=10, dtype=tf.int32)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = (tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
           .batch(64 * strategy.num_replicas_in_sync).with_options(options))
history = model.fit(dataset, epochs=max(2, steps // 10), steps_per_epoch=10, verbose=2)
losses = history.history["loss"]
sys.exit(report(losses[-1] < losses[0], "gpus=%d replicas=%d loss %.4f -> %.4f tf=%s" % (
    len(gpus), strategy.num_replicas_in_sync, losses[0], losses[-1], tf.__version__)))
