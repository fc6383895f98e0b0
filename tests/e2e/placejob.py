"""A real PyTorch job whose DataLoader (no workers: the items load in the
loop's own process) keeps its GPU waiting on one line, for the tests of lost
time by place.

    placejob.py shared      `__getitem__` calls the shared helper
                            records.load_record (records.py, on PYTHONPATH)
    placejob.py own         `__getitem__` calls its own slow `augment`

Prints "ready" once batches flow.
"""

import sys

import torch.utils.data


def augment(i):
    x = 0
    for k in range(400_000):  # the job's own slow line
        x += k * i
    return x


class Items(torch.utils.data.Dataset):
    def __init__(self, shared):
        self.shared = shared

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        if self.shared:
            import records

            return records.load_record(i)
        return augment(i)


def main():
    loader = torch.utils.data.DataLoader(Items(sys.argv[1] == "shared"), batch_size=4, num_workers=0)
    for step, batch in enumerate(loader):
        _ = batch.sum()
        if step == 2:
            print("ready", flush=True)


if __name__ == "__main__":
    main()
